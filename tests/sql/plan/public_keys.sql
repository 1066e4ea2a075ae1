-- options: {"epsilon": 1}
SELECT editor, COUNT(*) FROM students GROUP BY editor
