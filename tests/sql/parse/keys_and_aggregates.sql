SELECT editor, COUNT(*) AS n, AVG(scholarship) AS mean
FROM students
GROUP BY editor
