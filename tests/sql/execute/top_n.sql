SELECT TOP 3 editor, COUNT(*) AS n FROM students GROUP BY editor ORDER BY COUNT(*) DESC
