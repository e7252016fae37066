-- Saved example queries of the dashboard's SQL page (read-only; shown to users as starting points).

-- name: accuracy_by_run_and_dataset
SELECT run_id, dataset, problems, average_at_n, pass_at_n FROM dataset_metrics ORDER BY run_id, dataset;

-- name: verdicts
SELECT run_id, verdict, count(*) AS samples FROM samples GROUP BY ALL ORDER BY 1, 3 DESC;

-- name: longest_correct_responses
SELECT run_id, problem_id, n_tokens FROM samples WHERE verdict = 'correct' ORDER BY n_tokens DESC LIMIT 20;

-- name: suspicious_passes
SELECT run_id, problem_id, sample_idx, relevance, answer_only FROM suspicious_passes ORDER BY relevance;

-- name: reward_curve
SELECT run_id, step, value FROM train_metrics WHERE name = 'reward/mean' ORDER BY run_id, step;

-- name: schema
SELECT table_name, column_name, data_type FROM information_schema.columns ORDER BY table_name, ordinal_position;
