SELECT CASE WHEN scholarship > 1000 THEN 'high' ELSE 'low' END AS band, COUNT(*) AS n FROM students GROUP BY band
