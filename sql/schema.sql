-- The store's relations (docs/architecture.md §The store). Names are part of the user-facing SQL interface.
-- Idempotent: every statement can run on an existing store.

CREATE TABLE IF NOT EXISTS runs (
    run_id      VARCHAR PRIMARY KEY,
    kind        VARCHAR NOT NULL,            -- 'eval' | 'train' | 'reference' | 'imported' (another tool's generations) | 'rescore'
    model       VARCHAR,
    created_at  TIMESTAMP NOT NULL DEFAULT current_timestamp,
    status      VARCHAR NOT NULL,            -- 'running' | 'finished' | 'failed' | 'stopped' (by a monitor)
    config      JSON,
    manifest    JSON,                        -- git commit/dirty, packages, engine, sampling, template hash, seed
    parent_run_id VARCHAR,                   -- eval runs made during training point at the training run
    train_step  INTEGER
);

CREATE TABLE IF NOT EXISTS problems (
    dataset         VARCHAR NOT NULL,
    problem_id      VARCHAR NOT NULL,
    problem         VARCHAR NOT NULL,
    gold            VARCHAR NOT NULL,        -- the raw answer field, JSON-encoded
    gold_normalized VARCHAR NOT NULL,
    meta            JSON,
    PRIMARY KEY (dataset, problem_id)
);

CREATE TABLE IF NOT EXISTS samples (
    run_id           VARCHAR NOT NULL,
    dataset          VARCHAR NOT NULL,
    problem_id       VARCHAR NOT NULL,
    sample_idx       INTEGER NOT NULL,
    response         VARCHAR NOT NULL,
    extracted_answer VARCHAR,
    verdict          VARCHAR NOT NULL CHECK (verdict IN ('correct', 'wrong', 'no_answer', 'timeout', 'gold_unparsable', 'error')),
    score            DOUBLE NOT NULL,
    n_tokens         INTEGER,
    finish_reason    VARCHAR,
    verify_ms        DOUBLE,
    relevance        DOUBLE,                 -- share of the problem's content terms the reasoning uses (prl.grading.relevance)
    answer_only      BOOLEAN,                -- the response is (almost) nothing but its final answer
    best_fit         VARCHAR,                -- correct samples: the problem of the benchmark the reasoning fits best (prl.grading.relevance); NULL: not computed
    verdict_detail   VARCHAR,                -- why, where the verdict needs it (a timeout, an error, a known Math-Verify limitation)
    source_label     DOUBLE,                 -- imported runs: the source tool's own per-response score (correct when > 0.5)
    source_answer    VARCHAR,                -- imported runs: the answer the source tool extracted, where it wrote one
    source_gold      VARCHAR,                -- imported runs: the gold answer as the source file has it
    source_ref       VARCHAR,                -- imported runs: file and line/row the response came from
    PRIMARY KEY (run_id, dataset, problem_id, sample_idx)
);
-- stores made before these columns existed
ALTER TABLE samples ADD COLUMN IF NOT EXISTS relevance DOUBLE;
ALTER TABLE samples ADD COLUMN IF NOT EXISTS answer_only BOOLEAN;
ALTER TABLE samples ADD COLUMN IF NOT EXISTS best_fit VARCHAR;
ALTER TABLE samples ADD COLUMN IF NOT EXISTS verdict_detail VARCHAR;
ALTER TABLE samples ADD COLUMN IF NOT EXISTS source_label DOUBLE;
ALTER TABLE samples ADD COLUMN IF NOT EXISTS source_answer VARCHAR;
ALTER TABLE samples ADD COLUMN IF NOT EXISTS source_gold VARCHAR;
ALTER TABLE samples ADD COLUMN IF NOT EXISTS source_ref VARCHAR;

CREATE TABLE IF NOT EXISTS train_metrics (
    run_id VARCHAR NOT NULL,
    step   INTEGER NOT NULL,
    name   VARCHAR NOT NULL,                 -- namespaced: reward/mean, actor/kl_ref, actor/clipfrac, prl/rho_mean ...
    value  DOUBLE,
    PRIMARY KEY (run_id, step, name)
);

CREATE TABLE IF NOT EXISTS train_alerts (     -- what a run's online monitors fired (prl/training/monitors.py)
    run_id     VARCHAR NOT NULL,
    step       INTEGER NOT NULL,                -- the step at whose end the monitor's condition began to hold
    monitor    VARCHAR NOT NULL,                -- entropy_collapse | kl_acceleration | reward_hacking | ...
    metric     VARCHAR NOT NULL,                -- the metric it read (train_metrics.name)
    value      DOUBLE,                          -- that metric's reading (NULL: not finite)
    threshold  DOUBLE,                          -- what the reading crossed (NULL: nonfinite)
    message    VARCHAR NOT NULL,
    action     VARCHAR NOT NULL,                -- 'warn' (the run went on) | 'stop' (the run stopped after it)
    PRIMARY KEY (run_id, step, monitor)
);

CREATE TABLE IF NOT EXISTS prl_segments (
    run_id      VARCHAR NOT NULL,
    step        INTEGER NOT NULL,
    rollout_idx INTEGER NOT NULL,
    segment_idx INTEGER NOT NULL,
    start_tok   INTEGER NOT NULL,
    end_tok     INTEGER NOT NULL,            -- inclusive: the segment's boundary token
    kl_to_go    DOUBLE,                      -- S at the boundary
    rho         DOUBLE,
    PRIMARY KEY (run_id, step, rollout_idx, segment_idx)
);

-- The training rollouts whose segments are in prl_segments, with their token texts (for the dashboard).
CREATE TABLE IF NOT EXISTS train_rollouts (
    run_id      VARCHAR NOT NULL,
    step        INTEGER NOT NULL,
    rollout_idx INTEGER NOT NULL,
    problem     VARCHAR NOT NULL,
    gold        VARCHAR,
    response    VARCHAR NOT NULL,
    reward      DOUBLE,
    tokens      JSON,                        -- decoded text of each response token, in order
    PRIMARY KEY (run_id, step, rollout_idx)
);

-- Studies (`prl study`): a grid of training settings (cells) x seeds; each (cell, seed) is one training
-- run and its evaluation, both ordinary runs above, tagged here with the study.
CREATE TABLE IF NOT EXISTS studies (
    study_id   VARCHAR PRIMARY KEY,
    created_at TIMESTAMP NOT NULL DEFAULT current_timestamp,
    status     VARCHAR NOT NULL,             -- 'running' | 'finished' | 'failed'
    config     JSON,                         -- the study file as read: study, base, cells (expanded)
    manifest   JSON                          -- git commit/dirty, packages, machine, seed list
);

CREATE TABLE IF NOT EXISTS study_cells (
    study_id     VARCHAR NOT NULL,
    cell         VARCHAR NOT NULL,
    seed         INTEGER NOT NULL,
    train_run_id VARCHAR NOT NULL,           -- runs.run_id of the cell's training run
    eval_run_id  VARCHAR,                    -- runs.run_id of the evaluation of its final policy
    varied       JSON,                       -- the dotted config keys this cell sets over the study's base
    status       VARCHAR NOT NULL,           -- 'pending' | 'running' | 'finished' | 'failed'
    finished_at  TIMESTAMP,
    PRIMARY KEY (study_id, cell, seed)
);

-- One row per (run, problem): how many samples, how many correct, average@n.
CREATE OR REPLACE VIEW problem_outcomes AS
SELECT run_id, dataset, problem_id,
       count(*)                                   AS n,
       sum(CASE WHEN verdict = 'correct' THEN 1 ELSE 0 END) AS c,
       avg(score)                                 AS average
FROM samples
GROUP BY run_id, dataset, problem_id;

-- One row per (run, data set): problems, samples per problem, average@n and pass@n.
CREATE OR REPLACE VIEW dataset_metrics AS
SELECT run_id, dataset,
       count(*)                      AS problems,
       min(n)                        AS n,
       avg(average)                  AS average_at_n,
       avg(CASE WHEN c > 0 THEN 1.0 ELSE 0.0 END) AS pass_at_n
FROM problem_outcomes
GROUP BY run_id, dataset;

-- Correct samples whose reasoning is about another problem (the paper's Appendix-C case: right answer,
-- reasoning that fits another problem of the benchmark better, or hardly refers to this one) or that give
-- only an answer. The rules: prl.grading.relevance.SUSPICION_RULES (flagged_by names the ones that hold, in
-- that order; prl.grading.relevance.flagged_by is the same in Python, threshold SUSPICIOUS_BELOW).
CREATE OR REPLACE VIEW suspicious_passes AS
SELECT s.run_id, s.dataset, s.problem_id, s.sample_idx, s.relevance, s.answer_only, s.best_fit,
       s.extracted_answer, s.n_tokens, s.response,
       concat_ws(', ', CASE WHEN s.answer_only THEN 'answer_only' END,
                       CASE WHEN s.best_fit <> s.problem_id THEN 'fits_another' END,
                       CASE WHEN s.best_fit IS NULL AND s.relevance < 0.15 THEN 'low_relevance' END) AS flagged_by
FROM samples s
WHERE s.verdict = 'correct'
  AND (s.answer_only OR s.best_fit <> s.problem_id OR (s.best_fit IS NULL AND s.relevance < 0.15));

-- A researcher's reading of a suspicious pass (the Failures page's case view): the response is about its own
-- problem after all ('not_suspicious', a false flag) or it is the Appendix-C case / answer only ('confirmed';
-- the values: prl.grading.relevance.JUDGEMENTS). One row per sample, the latest judgement; the samples are never
-- changed. Written only by prl.store.db.Store.set_judgement (named queries set_judgement / clear_judgement).
CREATE TABLE IF NOT EXISTS judgements (
    run_id      VARCHAR NOT NULL,
    dataset     VARCHAR NOT NULL,
    problem_id  VARCHAR NOT NULL,
    sample_idx  INTEGER NOT NULL,
    judgement   VARCHAR NOT NULL CHECK (judgement IN ('not_suspicious', 'confirmed')),
    flagged_by  VARCHAR,                     -- the suspicious_passes rules that listed the sample when it was judged
    note        VARCHAR,
    judged_at   TIMESTAMP NOT NULL DEFAULT current_timestamp,
    PRIMARY KEY (run_id, dataset, problem_id, sample_idx)
);
