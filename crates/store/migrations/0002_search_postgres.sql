-- maslens store, version 2 (PostgreSQL): full-text search over step content, the agent filter,
-- keyset indexes for the run list, job batches. SQLite runs 0002_search_sqlite.sql instead (the same
-- tables; FTS5 for the full-text index); a database only ever sees one of the two.

-- One row per step of a stored trace: the step's text (content, then tool-call names and arguments),
-- at most 64 KiB (a tsvector is limited to 1 MB). Rewritten with the run's trace in the same
-- transaction. `tsv` holds its words (lower-cased, no stemming: the 'simple' configuration, like
-- SQLite's unicode61 tokenizer), stored so that checking one run's steps parses no text.
CREATE TABLE step_text (
    run_id  TEXT NOT NULL,
    step    BIGINT NOT NULL,               -- Step::index (the source's step index)
    agent   TEXT,
    content TEXT NOT NULL,
    tsv     TSVECTOR GENERATED ALWAYS AS (to_tsvector('simple', content)) STORED,
    PRIMARY KEY (run_id, step)
);
CREATE INDEX step_text_tsv ON step_text USING GIN (tsv);

-- Agents acting in each run (runs.agents as rows), with the run's received_ns, for the agent filter.
CREATE TABLE run_agents (
    run_id      TEXT NOT NULL,
    agent       TEXT NOT NULL,
    received_ns BIGINT NOT NULL,
    PRIMARY KEY (run_id, agent)
);
CREATE INDEX run_agents_agent ON run_agents (agent, received_ns, run_id);

-- Keyset pagination of the run list (newest first), unfiltered and by the common filters.
CREATE INDEX runs_recv_id ON runs (received_ns, id);
CREATE INDEX runs_outcome_recv ON runs (outcome, received_ns, id);
CREATE INDEX runs_system_recv ON runs (system, received_ns, id);
CREATE INDEX runs_located_recv ON runs (located_agent, received_ns, id);
-- Risk filters (the UI's "risk at least"): a selective threshold reads few rows instead of walking the list.
CREATE INDEX runs_risk_recv ON runs (risk, received_ns, id);

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
