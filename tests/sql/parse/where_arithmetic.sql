SELECT COUNT(*) FROM students WHERE birth_year + 1 > 1995 AND (birth_year * 2) % 3 = 0
