-- options: {"epsilon": 1}
SELECT DISTINCT editor FROM students
