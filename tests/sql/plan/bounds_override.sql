-- options: {"epsilon": 1, "bounds": {"birth_year": [1990, 2000]}}
SELECT AVG(birth_year) FROM students
