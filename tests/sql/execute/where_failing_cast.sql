-- options: {"epsilon": 1}
SELECT COUNT(*) AS n FROM students WHERE CAST(editor AS INTEGER) = 1
