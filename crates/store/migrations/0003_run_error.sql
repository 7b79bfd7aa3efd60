-- Why a run could not be assembled or diagnosed (state 'failed'); NULL otherwise. A failed run
-- is skipped by the pipeline until new spans reopen it.
ALTER TABLE runs ADD COLUMN error TEXT;
