-- Reports of the improvement loop (maslens_core::improve::ImproveReport JSON, `maslens improve --db`),
-- found by the system they improved: the proposal page shows the latest one's verification.
CREATE TABLE improve_reports (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL,                -- the system
    body       TEXT NOT NULL,
    created_ns BIGINT NOT NULL
);
