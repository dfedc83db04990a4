-- Issue #22, item 4: a teardown that had to stop processes the server had moved out of its
-- process group (a daemon that called setsid, a double fork) or left running. Each is a
-- JSON object: pid, ppid, pgid, sid, command (its command line, secrets redacted), why, the
-- signal that ended it and whether it still ran afterwards. NULL: the stop found none (or
-- the restart was recorded before stops looked).
ALTER TABLE restarts ADD COLUMN stray_processes JSON;
