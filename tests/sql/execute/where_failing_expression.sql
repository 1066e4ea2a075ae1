-- options: {"epsilon": 1}
-- A division by zero must not raise on some datasets: TRY makes the row predicate total.
SELECT COUNT(*) AS n FROM students WHERE 1 // (birth_year - 1995) = 0
