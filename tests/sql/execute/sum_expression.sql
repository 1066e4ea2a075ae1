SELECT SUM(scholarship * 2 + 1) AS s, AVG(CASE WHEN gender = 'male' THEN scholarship ELSE 0 END) AS a FROM students
