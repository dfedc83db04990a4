"""The fault tests' own server (fault_server.py): an OpenAI-compatible streaming server
that misbehaves on purpose, run as a process (the fault suite's command arms) or in a thread
(serve_in_thread). It shares no code with benchledger's client or simulator, so a parsing
bug in either cannot hide in the server that tests it."""
