-- maslens store, version 2 (SQLite): full-text search over step content, the agent filter, keyset
-- indexes for the run list, job batches. PostgreSQL runs 0002_search_postgres.sql instead (the same
-- tables; its own full-text index); a database only ever sees one of the two.

-- Each run with a trace gets a search key (assigned when its steps are first indexed, never changed);
-- its steps' rows in step_text are numbered search_key * 2^20 + position, so that the full-text
-- index's rowids name their run (rowid >> 20) and one run's steps are one rowid range.
ALTER TABLE runs ADD COLUMN search_key BIGINT;
CREATE UNIQUE INDEX runs_search_key ON runs (search_key);

-- One row per step of a stored trace: the step's text (content, then tool-call names and arguments),
-- at most 64 KiB. Rewritten with the run's trace in the same transaction. `id` is an explicit
-- INTEGER PRIMARY KEY (the rowid FTS5 refers to), so VACUUM never renumbers it.
CREATE TABLE step_text (
    id      INTEGER PRIMARY KEY,           -- runs.search_key * 2^20 + the step's position
    run_id  TEXT NOT NULL,
    step    BIGINT NOT NULL,               -- Step::index (the source's step index)
    agent   TEXT,
    content TEXT NOT NULL,
    UNIQUE (run_id, step)
);

-- FTS5 over step_text.content (external content: the text is stored once, in step_text).
CREATE VIRTUAL TABLE step_fts USING fts5(
    content, content='step_text', content_rowid='id', tokenize='unicode61 remove_diacritics 2'
);
CREATE TRIGGER step_text_ai AFTER INSERT ON step_text BEGIN
    INSERT INTO step_fts (rowid, content) VALUES (new.id, new.content);
END;
CREATE TRIGGER step_text_ad AFTER DELETE ON step_text BEGIN
    INSERT INTO step_fts (step_fts, rowid, content) VALUES ('delete', old.id, old.content);
END;
CREATE TRIGGER step_text_au AFTER UPDATE ON step_text BEGIN
    INSERT INTO step_fts (step_fts, rowid, content) VALUES ('delete', old.id, old.content);
    INSERT INTO step_fts (rowid, content) VALUES (new.id, new.content);
END;

-- Agents acting in each run (runs.agents as rows), with the run's received_ns, for the agent filter.
CREATE TABLE run_agents (
    run_id      TEXT NOT NULL,
    agent       TEXT NOT NULL,
    received_ns BIGINT NOT NULL,
    PRIMARY KEY (run_id, agent)
);
CREATE INDEX run_agents_agent ON run_agents (agent, received_ns, run_id);

-- Keyset pagination of the run list (newest first), unfiltered and by the common filters. The
-- search key rides along, so a text filter is checked from the index alone.
CREATE INDEX runs_recv_id ON runs (received_ns, id, search_key);
CREATE INDEX runs_outcome_recv ON runs (outcome, received_ns, id, search_key);
CREATE INDEX runs_system_recv ON runs (system, received_ns, id, search_key);
CREATE INDEX runs_located_recv ON runs (located_agent, received_ns, id, search_key);
-- Risk filters (the UI's "risk at least"): a selective threshold reads few rows instead of walking the list.
CREATE INDEX runs_risk_recv ON runs (risk, received_ns, id, search_key);

-- Credit tables of one run.
CREATE INDEX credit_tables_run ON credit_tables (run_id, created_ns);

-- Jobs queued together (one UI action over many runs). Many-to-many: a deduplicated job may belong
-- to several batches.
CREATE TABLE job_batches (
    batch  TEXT NOT NULL,
    job_id TEXT NOT NULL,
    PRIMARY KEY (batch, job_id)
);

-- One-off store tasks done (e.g. 'search_backfill': every run's step_text/run_agents rows built).
CREATE TABLE store_flags (
    name  TEXT PRIMARY KEY,
    value BIGINT NOT NULL
);
