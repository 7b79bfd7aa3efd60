-- maslens store, version 1. Portable SQL for SQLite and PostgreSQL (the sqlx Any driver): TEXT, BIGINT and
-- DOUBLE PRECISION only; times are Unix nanoseconds (BIGINT), JSON is TEXT, flags are BIGINT 0/1.

-- A run: one maslens trace. Received over OTLP (assembled from its spans) or imported from a file.
CREATE TABLE runs (
    id            TEXT PRIMARY KEY,          -- the trace id: conversation/session id, OTel trace id, or file id
    source        TEXT NOT NULL,             -- 'otlp' or 'import'
    system        TEXT,                      -- service.name / Trace.source
    trace_json    TEXT,                      -- the maslens Trace (NULL until first assembled)
    trace_hash    TEXT,                      -- SHA-256 of trace_json
    task          TEXT,
    outcome       TEXT,
    n_steps       BIGINT NOT NULL DEFAULT 0,
    n_spans       BIGINT NOT NULL DEFAULT 0,
    agents        TEXT,                      -- agent names, space separated, for filters
    has_root      BIGINT NOT NULL DEFAULT 0, -- a root span arrived
    first_ns      BIGINT,                    -- earliest span start
    last_ns       BIGINT,                    -- latest span end
    received_ns   BIGINT NOT NULL,           -- wall clock of the last ingest touching this run
    ingest_seq    BIGINT NOT NULL DEFAULT 0, -- bumped by every ingest touching the run
    assembled_seq BIGINT NOT NULL DEFAULT 0, -- ingest_seq the stored trace was assembled from
    state         TEXT NOT NULL,             -- 'open' (spans may still arrive) or 'complete'
    completed_ns  BIGINT,
    located_agent TEXT,                      -- latest localization, denormalized for filters
    located_step  BIGINT,
    risk          DOUBLE PRECISION           -- latest implicit-failure risk
);
CREATE INDEX runs_received ON runs (received_ns);
CREATE INDEX runs_state ON runs (state, received_ns);
CREATE INDEX runs_dirty ON runs (assembled_seq, ingest_seq);

-- Which run each OpenTelemetry trace belongs to (several traces may share a conversation id).
CREATE TABLE otel_traces (
    otel_trace_id TEXT PRIMARY KEY,
    run_id        TEXT NOT NULL
);
CREATE INDEX otel_traces_run ON otel_traces (run_id);

-- Every span received, once (idempotent on trace id + span id).
CREATE TABLE spans (
    otel_trace_id  TEXT NOT NULL,
    span_id        TEXT NOT NULL,
    parent_span_id TEXT,
    name           TEXT NOT NULL,
    start_ns       BIGINT NOT NULL,
    end_ns         BIGINT NOT NULL,
    record         TEXT NOT NULL,            -- the flattened span (maslens_otlp::span::SpanRecord) as JSON
    received_ns    BIGINT NOT NULL,
    PRIMARY KEY (otel_trace_id, span_id)
);

-- Every diagnosis: which method, model, prompts and parameters made it, what it cost, what it said.
CREATE TABLE diagnoses (
    id              TEXT PRIMARY KEY,
    run_id          TEXT NOT NULL,
    method          TEXT NOT NULL,           -- 'prior', 'locate', 'scan', 'credit', ...
    model           TEXT,
    prompt_versions TEXT,                    -- JSON object: prompt id -> sha256
    params          TEXT,                    -- JSON
    usage           TEXT,                    -- JSON (maslens_llm::Totals)
    trace_hash      TEXT,                    -- the trace it judged
    agent           TEXT,                    -- localization answer (when the method gives one)
    step            BIGINT,
    span_id         TEXT,                    -- the decisive step's span, when the trace came over OTLP
    otel_trace_id   TEXT,
    confidence      DOUBLE PRECISION,
    risk            DOUBLE PRECISION,
    result          TEXT NOT NULL,           -- the method's full verdict as JSON
    created_ns      BIGINT NOT NULL,
    elapsed_ms      BIGINT
);
CREATE INDEX diagnoses_run ON diagnoses (run_id, created_ns);

-- Implicit-failure events of a scan diagnosis, one row per event, for filters and the UI.
CREATE TABLE implicit_events (
    diagnosis_id TEXT NOT NULL,
    run_id       TEXT NOT NULL,
    ordinal      BIGINT NOT NULL,
    step         BIGINT,
    agent        TEXT,
    error_type   TEXT,
    severity     DOUBLE PRECISION,
    absorbed_by  BIGINT,
    event        TEXT NOT NULL,              -- JSON
    PRIMARY KEY (diagnosis_id, ordinal)
);
CREATE INDEX implicit_events_run ON implicit_events (run_id);

-- Credit tables (role x round) of debate runs and evaluation reports, as the owning crates write them.
CREATE TABLE credit_tables (
    id         TEXT PRIMARY KEY,
    run_id     TEXT,
    name       TEXT NOT NULL,
    body       TEXT NOT NULL,                -- JSON (maslens_credit::CreditRun)
    created_ns BIGINT NOT NULL
);
CREATE TABLE eval_reports (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    body       TEXT NOT NULL,                -- JSON (maslens_eval report, format_version 3)
    created_ns BIGINT NOT NULL
);

-- The diagnosis queue. A job is claimed by one worker (row locks on PostgreSQL); a claim whose worker
-- died is given back after its lease; `dedup` keeps one job per (run, method, trace version, params).
CREATE TABLE jobs (
    id           TEXT PRIMARY KEY,
    run_id       TEXT NOT NULL,
    method       TEXT NOT NULL,
    params       TEXT NOT NULL,              -- JSON
    dedup        TEXT NOT NULL UNIQUE,
    state        TEXT NOT NULL,              -- 'queued', 'running', 'done', 'failed'
    attempts     BIGINT NOT NULL DEFAULT 0,
    worker       TEXT,
    created_ns   BIGINT NOT NULL,
    claimed_ns   BIGINT,
    finished_ns  BIGINT,
    diagnosis_id TEXT,
    error        TEXT
);
CREATE INDEX jobs_state ON jobs (state, created_ns);

-- Write-back of diagnoses to where teams look (an OTLP logs endpoint, Arize Phoenix): retried until done.
CREATE TABLE outbox (
    id           TEXT PRIMARY KEY,           -- diagnosis id + target
    diagnosis_id TEXT NOT NULL,
    target       TEXT NOT NULL,              -- 'otlp' or 'phoenix'
    state        TEXT NOT NULL,              -- 'pending', 'done', 'failed'
    attempts     BIGINT NOT NULL DEFAULT 0,
    next_ns      BIGINT NOT NULL,
    last_error   TEXT
);
CREATE INDEX outbox_state ON outbox (state, next_ns);
