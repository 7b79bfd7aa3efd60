-- What maslens could not understand about a run (maslens_trace::RunWarning, a JSON array of
-- {"code", "message", "fix"}), copied from the trace's metadata when it is stored; NULL when none.
ALTER TABLE runs ADD COLUMN warnings TEXT;
