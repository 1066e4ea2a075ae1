-- options: {"epsilon": 1}
SELECT COUNT(*) AS n FROM students WHERE birth_year * 12 + 6 > 1994 * 12
