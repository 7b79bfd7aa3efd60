-- Workers claim by lane (instant methods apart from LLM methods): the oldest queued job of some
-- methods, found without walking the queued jobs of the other lane.
CREATE INDEX jobs_lane ON jobs (state, method, created_ns, id);
