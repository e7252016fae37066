-- Named queries of the store (aiosql style): `-- name: <name>` then one statement with $bind
-- parameters. Python never builds SQL text; prl.store loads these by name.

-- name: upsert_run
INSERT INTO runs (run_id, kind, model, status, config, manifest, parent_run_id, train_step)
VALUES ($run_id, $kind, $model, $status, $config, $manifest, $parent_run_id, $train_step)
ON CONFLICT (run_id) DO UPDATE SET status = excluded.status, manifest = excluded.manifest;

-- name: set_run_status
UPDATE runs SET status = $status WHERE run_id = $run_id;

-- name: insert_problem
INSERT INTO problems (dataset, problem_id, problem, gold, gold_normalized, meta)
VALUES ($dataset, $problem_id, $problem, $gold, $gold_normalized, $meta)
ON CONFLICT DO NOTHING;

-- name: insert_sample
INSERT INTO samples (run_id, dataset, problem_id, sample_idx, response, extracted_answer, verdict, score,
                     n_tokens, finish_reason, verify_ms)
VALUES ($run_id, $dataset, $problem_id, $sample_idx, $response, $extracted_answer, $verdict, $score,
        $n_tokens, $finish_reason, $verify_ms)
ON CONFLICT DO NOTHING;

-- name: stored_sample_keys
SELECT dataset, problem_id, sample_idx FROM samples WHERE run_id = $run_id;

-- name: insert_train_metric
INSERT INTO train_metrics (run_id, step, name, value) VALUES ($run_id, $step, $name, $value)
ON CONFLICT DO NOTHING;

-- name: dataset_metrics_for_run
SELECT dataset, problems, n, average_at_n, pass_at_n FROM dataset_metrics WHERE run_id = $run_id ORDER BY dataset;

-- name: problem_outcomes_for_run
SELECT dataset, problem_id, n, c, average FROM problem_outcomes WHERE run_id = $run_id ORDER BY dataset, problem_id;

-- name: verdict_counts
SELECT dataset, verdict, count(*) AS samples FROM samples WHERE run_id = $run_id GROUP BY dataset, verdict
ORDER BY dataset, verdict;
