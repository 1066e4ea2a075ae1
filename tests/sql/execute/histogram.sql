-- options: {"epsilon": 1}
SELECT editor, COUNT(*) AS n FROM students GROUP BY editor ORDER BY n DESC
