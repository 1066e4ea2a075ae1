-- options: {"epsilon": 1}
SELECT editor, MEDIAN(scholarship) AS med, QUANTILE(scholarship, 0.9) AS p90 FROM students GROUP BY editor
