-- options: {"epsilon": 1}
SELECT module, COUNT(DISTINCT student_id) AS students, AVG(mark) AS mean FROM marks GROUP BY module
