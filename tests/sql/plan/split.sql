-- options: {"epsilon": 1, "split": {"n": 3, "s": 1}}
SELECT COUNT(*) AS n, SUM(scholarship) AS s FROM students
