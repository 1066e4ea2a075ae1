SELECT editor, COUNT(*) AS n, SUM(scholarship) AS total FROM students GROUP BY editor
