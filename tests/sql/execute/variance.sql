-- options: {"epsilon": 1}
SELECT gender, VARIANCE(scholarship) AS v, STDDEV(scholarship) AS sd FROM students GROUP BY gender
