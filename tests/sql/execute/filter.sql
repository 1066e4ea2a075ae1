SELECT COUNT(*) FILTER (WHERE gender = 'male') AS men, SUM(scholarship) FILTER (WHERE gender = 'female') AS women_total FROM students
