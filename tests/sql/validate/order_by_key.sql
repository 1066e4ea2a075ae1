SELECT editor, COUNT(*) AS n FROM students GROUP BY editor ORDER BY editor
