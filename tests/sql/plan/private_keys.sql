-- options: {"epsilon": 1, "delta": 1e-6}
SELECT department, COUNT(*) FROM students GROUP BY department
