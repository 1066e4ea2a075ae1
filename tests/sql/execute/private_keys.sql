-- options: {"epsilon": 1, "delta": 1e-6}
SELECT birth_year, COUNT(*) AS n FROM students GROUP BY birth_year
