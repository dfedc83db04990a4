-- One row per series of a historical report: the rows of one import that share a profile,
-- an evidence kind, a model, runtime, backend and hardware. `varying` names the workload
-- dimensions whose recorded values differ between its points (an empty cell is not a
-- value), `detail` their values. A series varying in more than one dimension was never a
-- controlled experiment (the concurrency changed, and so did the request count): its
-- entries carry a warning that says so.
CREATE VIEW report_series AS
WITH dims AS (
    SELECT run_id, profile, evidence, model, runtime, backend, hardware,
           count(*) AS points,
           list_sort(list(DISTINCT input_tokens))  AS input_tokens,
           list_sort(list(DISTINCT output_target)) AS output_target,
           list_sort(list(DISTINCT clients))       AS concurrency,
           list_sort(list(DISTINCT requests))      AS requests,
           list_sort(list(DISTINCT arrival))       AS arrival,
           list_sort(list(DISTINCT prompt_cache))  AS prompt_cache
    FROM report_rows
    GROUP BY ALL
)
SELECT run_id, profile, evidence, model, runtime, backend, hardware, points,
       (len(input_tokens) > 1)::INTEGER + (len(output_target) > 1)::INTEGER
           + (len(concurrency) > 1)::INTEGER + (len(requests) > 1)::INTEGER
           + (len(arrival) > 1)::INTEGER + (len(prompt_cache) > 1)::INTEGER
           AS varying_dimensions,
       concat_ws(', ',
           CASE WHEN len(input_tokens) > 1 THEN 'input_tokens' END,
           CASE WHEN len(output_target) > 1 THEN 'output_target' END,
           CASE WHEN len(concurrency) > 1 THEN 'concurrency' END,
           CASE WHEN len(requests) > 1 THEN 'requests' END,
           CASE WHEN len(arrival) > 1 THEN 'arrival' END,
           CASE WHEN len(prompt_cache) > 1 THEN 'prompt_cache' END) AS varying,
       concat_ws('; ',
           CASE WHEN len(input_tokens) > 1
                THEN 'input_tokens ' || array_to_string(input_tokens, ', ') END,
           CASE WHEN len(output_target) > 1
                THEN 'output_target ' || array_to_string(output_target, ', ') END,
           CASE WHEN len(concurrency) > 1
                THEN 'concurrency ' || array_to_string(concurrency, ', ') END,
           CASE WHEN len(requests) > 1
                THEN 'requests ' || array_to_string(requests, ', ') END,
           CASE WHEN len(arrival) > 1
                THEN 'arrival ' || array_to_string(arrival, ', ') END,
           CASE WHEN len(prompt_cache) > 1
                THEN 'prompt_cache ' || array_to_string(prompt_cache, ', ') END) AS detail
FROM dims
