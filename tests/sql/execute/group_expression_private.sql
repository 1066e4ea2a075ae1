-- options: {"epsilon": 1, "delta": 1e-6}
SELECT birth_year / 10 AS decade, COUNT(*) AS n FROM students GROUP BY decade
