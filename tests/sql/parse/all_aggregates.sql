SELECT COUNT(*), COUNT(editor), COUNT(DISTINCT student_id), SUM(scholarship), AVG(scholarship),
       VARIANCE(scholarship), VAR_SAMP(scholarship), STDDEV(scholarship), MEDIAN(scholarship),
       QUANTILE(scholarship, 0.9) AS p90, QUANTILE_CONT(scholarship, 0.25) AS p25
FROM students
