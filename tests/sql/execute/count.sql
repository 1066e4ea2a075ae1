-- options: {"epsilon": 1}
SELECT COUNT(*) AS n FROM students
