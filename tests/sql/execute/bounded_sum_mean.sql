-- options: {"epsilon": 1}
SELECT SUM(scholarship) AS total, AVG(scholarship) AS mean FROM students WHERE department = 'Computing'
