-- T17: how late the client's event loop was, at most, while each request's decode span ran
-- (the probes that waited then; benchledger.client.ruler.lag_during). A span shorter than it
-- is a burst; before this column the window's client_lag_p99_ms judged every request, so one
-- stall withheld the rates of requests measured while the loop kept time. NULL where not
-- measured (older raw files, imports, warm-up): the view falls back to the window's p99.
ALTER TABLE request_records ADD COLUMN client_lag_ms DOUBLE;
