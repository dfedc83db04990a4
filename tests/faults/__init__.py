"""The fault suite's own server (fault_server.py): an OpenAI-compatible streaming server
that misbehaves on purpose. It shares no code with benchledger's client or simulator, so a
parsing bug in either cannot hide in the server that tests it."""
