SELECT COUNT(*) * 2 AS twice, (SUM(scholarship)) / COUNT(*) AS mean, 1 AS one FROM students
