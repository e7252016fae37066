-- Named queries of the store (aiosql style): `-- name: <name>` then one statement with $bind
-- parameters. Python never builds SQL text; prl.store loads these by name.

-- name: upsert_run
INSERT INTO runs (run_id, kind, model, status, config, manifest, parent_run_id, train_step)
VALUES ($run_id, $kind, $model, $status, $config, $manifest, $parent_run_id, $train_step)
ON CONFLICT (run_id) DO UPDATE SET status = excluded.status, manifest = excluded.manifest, config = excluded.config;

-- name: set_run_status
UPDATE runs SET status = $status WHERE run_id = $run_id;

-- name: insert_problem
INSERT INTO problems (dataset, problem_id, problem, gold, gold_normalized, meta)
VALUES ($dataset, $problem_id, $problem, $gold, $gold_normalized, $meta)
ON CONFLICT DO NOTHING;

-- name: stored_sample_keys
SELECT dataset, problem_id, sample_idx FROM samples WHERE run_id = $run_id;

-- name: insert_incoming_train_metrics
-- bulk insert of an Arrow table registered as incoming_rows (prl.store.Store.insert_rows)
INSERT INTO train_metrics BY NAME SELECT * FROM incoming_rows ON CONFLICT DO NOTHING;

-- name: insert_incoming_train_alerts
-- bulk insert of an Arrow table registered as incoming_rows; an alert already stored (a resumed run) stays as it was
INSERT INTO train_alerts BY NAME SELECT * FROM incoming_rows ON CONFLICT DO NOTHING;

-- name: alerts_for_runs
SELECT run_id, step, monitor, metric, value, threshold, message, action FROM train_alerts
WHERE list_contains($run_ids, run_id) ORDER BY run_id, step, monitor;

-- name: delete_alerts_after
DELETE FROM train_alerts WHERE run_id = $run_id AND step > $step;

-- name: dataset_metrics_for_run
SELECT dataset, problems, n, average_at_n, pass_at_n FROM dataset_metrics WHERE run_id = $run_id ORDER BY dataset;

-- name: count_samples
SELECT count(*) FROM samples;

-- name: insert_incoming_samples
-- bulk insert of an Arrow table registered as incoming_samples (prl.store.Store.insert_sample_table)
INSERT INTO samples BY NAME SELECT * FROM incoming_samples ON CONFLICT DO NOTHING;

-- name: stored_counts_for_run
-- samples already stored per problem: a resumed evaluation regenerates only problems with fewer than n
SELECT dataset, problem_id, count(*) AS stored FROM samples WHERE run_id = $run_id GROUP BY dataset, problem_id;

-- name: get_run
SELECT run_id, kind, model, created_at, status, config, manifest, parent_run_id, train_step
FROM runs WHERE run_id = $run_id;

-- name: list_runs
SELECT r.run_id, r.kind, r.model, r.created_at, r.status,
       (SELECT count(*) FROM samples s WHERE s.run_id = r.run_id) AS samples
FROM runs r ORDER BY r.created_at, r.run_id;

-- name: outcomes_for_runs
-- per-problem n and c of the given runs (list parameter), for pass@k, average@k and paired comparisons
SELECT run_id, dataset, problem_id, n, c FROM problem_outcomes
WHERE list_contains($run_ids, run_id) ORDER BY run_id, dataset, problem_id;

-- name: answers_for_run
-- extracted answers in sample order, for maj@k
SELECT dataset, problem_id, sample_idx, extracted_answer, verdict = 'correct' AS correct
FROM samples WHERE run_id = $run_id ORDER BY dataset, problem_id, sample_idx;

-- name: answer_styles_for_run
-- per data set: share of samples that show their working (an '=' before "The answer is"; the synthetic
-- task's step lines) and the average score of each style (NULL where a style has no sample)
SELECT dataset, count(*) AS samples, avg(CASE WHEN working THEN 1.0 ELSE 0.0 END) AS working_share,
       avg(score) FILTER (WHERE working) AS working_average, avg(score) FILTER (WHERE NOT working) AS direct_average
FROM (SELECT dataset, score, strpos(split_part(response, 'The answer is', 1), '=') > 0 AS working
      FROM samples WHERE run_id = $run_id)
GROUP BY dataset ORDER BY dataset;

-- name: suspicious_passes_for_run
SELECT dataset, problem_id, sample_idx, relevance, answer_only, best_fit, extracted_answer, n_tokens
FROM suspicious_passes WHERE run_id = $run_id
ORDER BY answer_only DESC, coalesce(best_fit <> problem_id, false) DESC, relevance, dataset, problem_id, sample_idx
LIMIT $limit;


-- name: insert_incoming_prl_segments
INSERT INTO prl_segments BY NAME SELECT * FROM incoming_rows ON CONFLICT DO NOTHING;

-- name: set_run_progress
UPDATE runs SET train_step = $train_step WHERE run_id = $run_id;

-- name: delete_train_metrics_after
-- a resumed training run drops the rows of steps after its checkpoint (they are redone)
DELETE FROM train_metrics WHERE run_id = $run_id AND step > $step;

-- name: delete_segments_after
DELETE FROM prl_segments WHERE run_id = $run_id AND step > $step;

-- name: train_steps_for_run
SELECT DISTINCT step FROM train_metrics WHERE run_id = $run_id ORDER BY step;

-- name: segments_for_run
SELECT step, rollout_idx, segment_idx, start_tok, end_tok, kl_to_go, rho FROM prl_segments
WHERE run_id = $run_id ORDER BY step, rollout_idx, segment_idx;


-- name: insert_incoming_train_rollouts
INSERT INTO train_rollouts BY NAME SELECT * FROM incoming_rows ON CONFLICT DO NOTHING;

-- name: delete_rollouts_after
DELETE FROM train_rollouts WHERE run_id = $run_id AND step > $step;

-- name: runs_full
-- every run with what its samples hold: how many, the average score, the data sets, problems and samples per
-- problem (min and max), and the kind of the run it derives from (an evaluation made during training points at
-- its training run; a rescore at the run it re-verified)
WITH per_problem AS (  -- one pass over the samples
    SELECT run_id, dataset, count(*) AS n, sum(score) AS score FROM samples GROUP BY run_id, dataset, problem_id),
per_run AS (
    SELECT run_id, sum(n) AS samples, sum(score) / sum(n) AS average, count(*) AS problems, min(n) AS n_min,
           max(n) AS n_max, string_agg(DISTINCT dataset, ', ' ORDER BY dataset) AS datasets
    FROM per_problem GROUP BY run_id)
SELECT r.run_id, r.kind, r.model, r.created_at, r.status, r.config, r.manifest, r.parent_run_id, r.train_step,
       coalesce(s.samples, 0) AS samples, s.average, s.datasets, s.problems, s.n_min, s.n_max,
       parent.kind AS parent_kind, parent.parent_run_id AS grandparent_run_id, parent.train_step AS parent_train_step
FROM runs r
LEFT JOIN per_run s ON s.run_id = r.run_id
LEFT JOIN runs parent ON parent.run_id = r.parent_run_id
ORDER BY r.created_at, r.run_id;

-- name: problem_row
SELECT dataset, problem_id, problem, gold, gold_normalized, meta FROM problems
WHERE dataset = $dataset AND problem_id = $problem_id;

-- name: problem_ids_for_runs
-- problems that have samples in any of the given runs, with how many runs solved them
SELECT dataset, problem_id, count(DISTINCT run_id) AS runs, avg(score) AS average FROM samples
WHERE list_contains($run_ids, run_id) GROUP BY dataset, problem_id ORDER BY dataset, problem_id;

-- name: samples_for_problem
-- with the source's own label, extraction and row where the run was imported (NULL elsewhere)
SELECT run_id, sample_idx, verdict, extracted_answer, n_tokens, finish_reason, relevance, answer_only,
       source_label, source_answer, source_ref, verdict_detail, response
FROM samples WHERE dataset = $dataset AND problem_id = $problem_id AND list_contains($run_ids, run_id)
ORDER BY run_id, sample_idx;

-- name: verdict_counts_for_runs
SELECT run_id, dataset, verdict, count(*) AS samples FROM samples WHERE list_contains($run_ids, run_id)
GROUP BY run_id, dataset, verdict ORDER BY run_id, dataset, verdict;

-- name: samples_by_verdict
SELECT run_id, dataset, problem_id, sample_idx, extracted_answer, n_tokens, finish_reason, response FROM samples
WHERE list_contains($run_ids, run_id) AND verdict = $verdict ORDER BY run_id, dataset, problem_id, sample_idx
LIMIT $limit;

-- name: suspicious_passes_for_runs
SELECT run_id, dataset, problem_id, sample_idx, relevance, answer_only, best_fit, extracted_answer, n_tokens, response
FROM suspicious_passes WHERE list_contains($run_ids, run_id)
ORDER BY answer_only DESC, coalesce(best_fit <> problem_id, false) DESC, relevance NULLS LAST, run_id, dataset, problem_id, sample_idx LIMIT $limit;

-- name: suspicious_case
-- one listed sample with what the Failures page's case view shows beside it: the problem asked and its gold and
-- the verdict's fields (no row: the sample is not a suspicious pass). The rules that list it are computed from
-- relevance, answer_only and best_fit by prl.grading.relevance.flagged_by (the view's flagged_by column is the
-- same; reading the signals keeps stores whose view predates that column readable)
SELECT v.run_id, v.dataset, v.problem_id, v.sample_idx, v.relevance, v.answer_only, v.best_fit, v.extracted_answer,
       v.n_tokens, v.response, s.verdict, s.score, s.source_answer, s.source_label,
       p.problem, p.gold, p.gold_normalized
FROM suspicious_passes v
JOIN samples s USING (run_id, dataset, problem_id, sample_idx)
LEFT JOIN problems p ON p.dataset = v.dataset AND p.problem_id = v.problem_id
WHERE v.run_id = $run_id AND v.dataset = $dataset AND v.problem_id = $problem_id AND v.sample_idx = $sample_idx;

-- name: has_judgements
-- whether the store has the judgements table (stores written before it existed gain it with their next write)
SELECT count(*) > 0 FROM information_schema.tables WHERE table_name = 'judgements';

-- name: judgements_for_runs
SELECT run_id, dataset, problem_id, sample_idx, judgement, flagged_by, note, judged_at FROM judgements
WHERE list_contains($run_ids, run_id) ORDER BY run_id, dataset, problem_id, sample_idx;

-- name: set_judgement
-- the one write of the dashboard (through prl.store.db.Store.set_judgement, which checks the sample is listed)
INSERT INTO judgements (run_id, dataset, problem_id, sample_idx, judgement, flagged_by, note)
VALUES ($run_id, $dataset, $problem_id, $sample_idx, $judgement, $flagged_by, $note)
ON CONFLICT (run_id, dataset, problem_id, sample_idx) DO UPDATE
SET judgement = excluded.judgement, flagged_by = excluded.flagged_by, note = excluded.note, judged_at = now();

-- name: suspicious_pass_exists
SELECT count(*) FROM suspicious_passes
WHERE run_id = $run_id AND dataset = $dataset AND problem_id = $problem_id AND sample_idx = $sample_idx;

-- name: clear_judgement
DELETE FROM judgements WHERE run_id = $run_id AND dataset = $dataset AND problem_id = $problem_id AND sample_idx = $sample_idx;

-- name: train_metrics_for_runs
SELECT run_id, step, name, value FROM train_metrics WHERE list_contains($run_ids, run_id) ORDER BY run_id, name, step;

-- name: eval_points_for_runs
-- evaluations made during training: their step and average score per data set
SELECT r.parent_run_id AS run_id, r.train_step AS step, s.dataset, avg(s.score) AS average, count(*) AS samples
FROM runs r JOIN samples s ON s.run_id = r.run_id
WHERE list_contains($run_ids, r.parent_run_id) GROUP BY 1, 2, 3 ORDER BY 1, 2, 3;

-- name: rollouts_for_run_step
SELECT rollout_idx, problem, gold, response, reward, tokens FROM train_rollouts
WHERE run_id = $run_id AND step = $step ORDER BY rollout_idx;

-- name: rollout_steps_for_run
SELECT DISTINCT step FROM train_rollouts WHERE run_id = $run_id ORDER BY step;

-- name: import_summary_for_run
-- samples, our correct count, samples with a source label, the source's correct count (label > 0.5) and the
-- samples where both agree (prl.imports.formats.label_correct is the same rule)
SELECT count(*) AS samples,
       sum(CASE WHEN verdict = 'correct' THEN 1 ELSE 0 END) AS correct,
       count(source_label) AS labelled,
       sum(CASE WHEN source_label > 0.5 THEN 1 ELSE 0 END) AS source_correct,
       sum(CASE WHEN source_label IS NOT NULL AND (verdict = 'correct') = (source_label > 0.5) THEN 1 ELSE 0 END) AS agree
FROM samples WHERE run_id = $run_id;

-- name: agreement_with_source
-- an imported run's samples with our verdict and the source's own label side by side (prl report --agreement)
SELECT s.dataset, s.problem_id, s.sample_idx, p.problem, p.gold_normalized AS gold, s.response, s.verdict,
       s.extracted_answer, s.verdict_detail, s.source_label, s.source_answer, s.source_gold, s.source_ref
FROM samples s JOIN problems p ON p.dataset = s.dataset AND p.problem_id = s.problem_id
WHERE s.run_id = $run_id ORDER BY s.dataset, s.problem_id, s.sample_idx;

-- name: agreement_between_runs
-- the samples two runs share (same problem and sample index), with both verdicts (prl report --agreement A --against B)
SELECT a.dataset, a.problem_id, a.sample_idx, p.problem, p.gold_normalized AS gold, a.response, a.verdict,
       a.extracted_answer, a.verdict_detail, b.verdict AS other_verdict, b.extracted_answer AS other_answer,
       b.response AS other_response, b.verdict_detail AS other_detail
FROM samples a
JOIN samples b ON b.dataset = a.dataset AND b.problem_id = a.problem_id AND b.sample_idx = a.sample_idx
JOIN problems p ON p.dataset = a.dataset AND p.problem_id = a.problem_id
WHERE a.run_id = $run_id AND b.run_id = $other_run_id
ORDER BY a.dataset, a.problem_id, a.sample_idx;

-- name: samples_with_gold_for_run
-- a run's samples with their problem's raw and normalised gold, for re-verification (prl rescore)
SELECT s.dataset, s.problem_id, s.sample_idx, s.response, s.n_tokens, s.finish_reason, s.source_label,
       s.source_answer, s.source_gold, s.source_ref, s.verdict, p.problem, p.gold, p.gold_normalized
FROM samples s JOIN problems p ON p.dataset = s.dataset AND p.problem_id = s.problem_id
WHERE s.run_id = $run_id ORDER BY s.dataset, s.problem_id, s.sample_idx;

-- name: problems_of_dataset
SELECT dataset, problem_id, problem, gold, gold_normalized, meta FROM problems WHERE dataset = $dataset
ORDER BY problem_id;

-- name: upsert_study
INSERT INTO studies (study_id, status, config, manifest) VALUES ($study_id, $status, $config, $manifest)
ON CONFLICT (study_id) DO UPDATE SET status = excluded.status, manifest = excluded.manifest;

-- name: set_study_status
UPDATE studies SET status = $status WHERE study_id = $study_id;

-- name: get_study
SELECT study_id, created_at, status, config, manifest FROM studies WHERE study_id = $study_id;

-- name: list_studies
SELECT study_id, created_at, status,
       (SELECT count(*) FROM study_cells c WHERE c.study_id = s.study_id) AS jobs,
       (SELECT count(*) FROM study_cells c WHERE c.study_id = s.study_id AND c.status = 'finished') AS finished
FROM studies s ORDER BY created_at, study_id;

-- name: upsert_study_cell
INSERT INTO study_cells (study_id, cell, seed, train_run_id, eval_run_id, varied, status)
VALUES ($study_id, $cell, $seed, $train_run_id, $eval_run_id, $varied, $status)
ON CONFLICT (study_id, cell, seed) DO UPDATE SET status = excluded.status, eval_run_id = excluded.eval_run_id;

-- name: finish_study_cell
UPDATE study_cells SET status = 'finished', eval_run_id = $eval_run_id, finished_at = current_timestamp
WHERE study_id = $study_id AND cell = $cell AND seed = $seed;

-- name: set_study_cell_status
UPDATE study_cells SET status = $status WHERE study_id = $study_id AND cell = $cell AND seed = $seed;

-- name: study_cells_for_study
SELECT c.cell, c.seed, c.train_run_id, c.eval_run_id, c.varied, c.status, c.finished_at,
       t.status AS train_status, t.config AS train_config, e.status AS eval_status
FROM study_cells c
LEFT JOIN runs t ON t.run_id = c.train_run_id
LEFT JOIN runs e ON e.run_id = c.eval_run_id
WHERE c.study_id = $study_id ORDER BY c.seed, c.cell;

-- name: study_problem_outcomes
-- Per (cell, seed, problem) of a study's finished evaluations: samples n, correct c, average@n.
SELECT c.cell, c.seed, o.dataset, o.problem_id, o.n, o.c, o.average
FROM study_cells c JOIN problem_outcomes o ON o.run_id = c.eval_run_id
WHERE c.study_id = $study_id AND c.status = 'finished'
ORDER BY c.cell, c.seed, o.dataset, o.problem_id;

-- name: study_train_curves
-- Reward and KL-to-reference of every step of a study's training runs, one row per (cell, seed, step).
-- The KL is actor/kl_ref (stores written before it was renamed hold it as kl/ref).
SELECT c.cell, c.seed, m.step,
       max(CASE WHEN m.name = 'reward/mean' THEN m.value END)                 AS reward,
       max(CASE WHEN m.name IN ('actor/kl_ref', 'kl/ref') THEN m.value END)  AS kl
FROM study_cells c JOIN train_metrics m ON m.run_id = c.train_run_id
WHERE c.study_id = $study_id AND m.name IN ('reward/mean', 'actor/kl_ref', 'kl/ref')
GROUP BY c.cell, c.seed, m.step ORDER BY c.cell, c.seed, m.step;

-- name: study_run_metrics
-- Per finished (cell, seed): each named heldout/ metric at its training run's last step that has it (the final
-- evaluation), and each other named metric's mean over the run's last 10 steps (claims of a study's report).
WITH m AS (
    SELECT c.cell, c.seed, t.step, t.name, t.value,
           max(t.step) OVER (PARTITION BY c.cell, c.seed, t.name) AS last_step
    FROM study_cells c JOIN train_metrics t ON t.run_id = c.train_run_id
    WHERE c.study_id = $study_id AND c.status = 'finished' AND list_contains($names, t.name)
)
SELECT cell, seed, name,
       CASE WHEN name LIKE 'heldout/%' THEN max(CASE WHEN step = last_step THEN value END)
            ELSE avg(CASE WHEN step > last_step - 10 THEN value END) END AS value
FROM m GROUP BY cell, seed, name ORDER BY cell, seed, name;

-- name: study_cell_status
SELECT status FROM study_cells WHERE study_id = $study_id AND cell = $cell AND seed = $seed;
