SELECT MIN(scholarship) AS lo, MAX(scholarship) AS hi FROM students
