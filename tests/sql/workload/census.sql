-- deniable's own analyst workload over a census-style survey panel.
--
-- Measured by tests/unit/test_sql_workload.py: each query is run with Session.sql and
-- classified as answered, refused (a DeniableError other than InternalError/EngineError) or
-- crashed. Run `.venv/bin/python tests/unit/test_sql_workload.py` for the per-construct table.
--
-- Data (src/deniable/datasets/census.py, fabricated, seed 2024):
--   census  census(2000, seed=2024): one row per (person, survey year), 1-4 rows per person.
--   jobs    jobs(census, seed=2024): 0-3 rows per person.
--   states  states(): public lookup table (50 rows), registered as public when the session
--           supports public tables, otherwise as an ordinary table without a privacy unit.
--
-- The harness registers exactly what the `-- table:` lines below say (JSON keyword arguments
-- of Session.add_table; "data" names the generator):
-- table: {"name": "census", "data": "census", "privacy_unit": "person_id", "max_groups": 4, "max_rows": 4, "bounds": {"age": [0, 100], "income": [0, 250000], "hours_per_week": [0, 99], "education": [1, 16], "year": [2015, 2024]}, "public_keys": {"sex": ["F", "M"], "race": [1, 2, 3, 4, 5, 6], "year": [2015, 2016, 2017, 2018, 2019, 2020, 2021, 2022, 2023, 2024], "marital_status": ["married", "never_married", "divorced", "widowed", "separated"], "employed": [true, false], "state": ["AL", "AK", "AZ", "AR", "CA", "CO", "CT", "DE", "FL", "GA", "HI", "ID", "IL", "IN", "IA", "KS", "KY", "LA", "ME", "MD", "MA", "MI", "MN", "MS", "MO", "MT", "NE", "NV", "NH", "NJ", "NM", "NY", "NC", "ND", "OH", "OK", "OR", "PA", "RI", "SC", "SD", "TN", "TX", "UT", "VT", "VA", "WA", "WV", "WI", "WY"]}}
-- table: {"name": "jobs", "data": "jobs", "privacy_unit": "person_id", "max_groups": 3, "max_rows": 3, "bounds": {"salary": [0, 300000]}, "public_keys": {"full_time": [true, false]}}
-- table: {"name": "states", "data": "states", "public": true}
--
-- So: group keys sex, race, year, marital_status, employed, state (census) and full_time (jobs)
-- are public; age, education, county, occupation, household_id, birth_date, employer, ... are
-- private keys (released through partition selection, which costs delta). Columns without
-- bounds (county, household_id, race, jobs.start_year) cannot be summed or averaged.
--
-- Headers of each query: `-- id:` (unique), `-- construct:` (tags, space separated),
-- `-- expect: answer` (a complete DP SQL system answers it, whether or not deniable does today)
-- or `-- expect: refuse <text>` (must be refused whatever we build; the message must contain
-- <text>, case-insensitive; `a|b` accepts either), optional `-- options: {json}` (keyword
-- arguments of Session.sql). Default options: epsilon=1, and delta=1e-6 offered to every
-- query; when deniable refuses delta because the query has no private keys, the harness
-- asks again without it (a refused query costs nothing).

-- ===================================================================== basic

-- id: basic_count_all
-- construct: basic
-- expect: answer
-- options: {"epsilon": 10}
SELECT COUNT(*) AS n FROM census

-- id: basic_count_by_year
-- construct: basic
-- expect: answer
-- options: {"epsilon": 10}
SELECT year, COUNT(*) AS n FROM census GROUP BY year

-- id: basic_count_by_sex
-- construct: basic
-- expect: answer
-- options: {"epsilon": 10}
SELECT sex, COUNT(*) AS n FROM census GROUP BY sex

-- id: basic_count_by_year_sex
-- construct: basic
-- expect: answer
-- options: {"epsilon": 10}
SELECT year, sex, COUNT(*) AS n FROM census GROUP BY year, sex

-- id: basic_sum_hours_by_state
-- construct: basic
-- expect: answer
SELECT state, SUM(hours_per_week) AS hours FROM census GROUP BY state

-- id: basic_avg_age_by_race
-- construct: basic
-- expect: answer
SELECT race, AVG(age) AS mean_age FROM census GROUP BY race

-- id: basic_avg_income_by_marital
-- construct: basic
-- expect: answer
SELECT marital_status, AVG(income) AS mean_income, COUNT(*) AS n FROM census GROUP BY marital_status

-- id: basic_count_by_education
-- construct: basic
-- expect: answer
SELECT education, COUNT(*) AS n FROM census GROUP BY education

-- id: basic_count_by_occupation
-- construct: basic
-- expect: answer
SELECT occupation, COUNT(*) AS workers FROM census GROUP BY occupation

-- id: basic_count_income_reported
-- construct: basic
-- expect: answer
SELECT COUNT(income) AS reported FROM census

-- id: basic_sum_avg_income_by_employed
-- construct: basic
-- expect: answer
SELECT employed, SUM(income) AS total, AVG(income) AS mean FROM census GROUP BY employed

-- id: basic_count_by_age
-- construct: basic
-- expect: answer
SELECT age, COUNT(*) AS n FROM census GROUP BY age

-- id: basic_group_by_position
-- construct: basic
-- expect: answer
SELECT sex, race, COUNT(*) FROM census GROUP BY 1, 2

-- id: basic_jobs_by_employer
-- construct: basic
-- expect: answer
SELECT employer, COUNT(*) AS jobs, AVG(salary) AS mean_salary FROM jobs GROUP BY employer

-- id: basic_jobs_full_time
-- construct: basic
-- expect: answer
SELECT full_time, COUNT(*) AS n, SUM(salary) AS payroll FROM jobs GROUP BY full_time

-- id: basic_lowercase_keywords
-- construct: basic
-- expect: answer
select sex, count(*) as n, avg(age) as a from census group by sex

-- ===================================================================== where

-- id: where_eq_state
-- construct: where
-- expect: answer
-- options: {"epsilon": 10}
SELECT COUNT(*) AS n FROM census WHERE state = 'CA'

-- id: where_in_states
-- construct: where basic
-- expect: answer
SELECT state, AVG(income) AS mean_income FROM census WHERE state IN ('CA', 'TX', 'NY', 'FL') GROUP BY state

-- id: where_between_age
-- construct: where
-- expect: answer
SELECT sex, COUNT(*) AS working_age FROM census WHERE age BETWEEN 18 AND 64 GROUP BY sex

-- id: where_like_occupation
-- construct: where
-- expect: answer
SELECT COUNT(*) AS engineers FROM census WHERE occupation LIKE '%engineer%'

-- id: where_not_like
-- construct: where
-- expect: answer
SELECT year, COUNT(*) AS n FROM census WHERE occupation NOT LIKE '%teacher%' GROUP BY year

-- id: where_is_null
-- construct: where
-- expect: answer
SELECT year, COUNT(*) AS nonresponse FROM census WHERE income IS NULL AND age >= 16 GROUP BY year

-- id: where_is_not_null
-- construct: where
-- expect: answer
SELECT AVG(income) AS mean_income FROM census WHERE income IS NOT NULL

-- id: where_and_or
-- construct: where
-- expect: answer
SELECT race, COUNT(*) AS n FROM census WHERE (age < 18 OR age > 65) AND employed GROUP BY race

-- id: where_not_in
-- construct: where
-- expect: answer
SELECT marital_status, COUNT(*) AS n FROM census WHERE race NOT IN (1, 2) GROUP BY marital_status

-- id: where_date_compare
-- construct: where
-- expect: answer
SELECT COUNT(*) AS boomers FROM census WHERE birth_date BETWEEN DATE '1946-01-01' AND DATE '1964-12-31'

-- id: where_extract_year
-- construct: where
-- expect: answer
SELECT sex, COUNT(*) AS n FROM census WHERE EXTRACT(YEAR FROM birth_date) >= 2000 GROUP BY sex

-- id: where_cast
-- construct: where
-- expect: answer
SELECT COUNT(*) AS n FROM census WHERE CAST(education AS DOUBLE) / 16 > 0.75

-- id: where_arith
-- construct: where
-- expect: answer
SELECT AVG(hours_per_week) AS h FROM census WHERE income / 52 > 1000

-- id: where_bool_not
-- construct: where
-- expect: answer
SELECT state, COUNT(*) AS unemployed FROM census WHERE NOT employed AND age BETWEEN 16 AND 64 GROUP BY state

-- id: where_ne_upper
-- construct: where
-- expect: answer
SELECT COUNT(*) AS n FROM census WHERE UPPER(marital_status) <> 'MARRIED' AND sex = 'F'

-- id: where_ilike
-- construct: where
-- expect: answer
SELECT COUNT(*) AS n FROM census WHERE occupation ILIKE 'C%'

-- id: where_jobs_salary
-- construct: where
-- expect: answer
SELECT employer, COUNT(*) AS n FROM jobs WHERE salary > 50000 AND start_year >= 2010 GROUP BY employer

-- ===================================================================== having

-- id: having_count
-- construct: having
-- expect: answer
SELECT state, COUNT(*) AS n FROM census GROUP BY state HAVING COUNT(*) > 50

-- id: having_alias
-- construct: having
-- expect: answer
SELECT occupation, COUNT(*) AS n FROM census GROUP BY occupation HAVING n >= 20

-- id: having_key
-- construct: having
-- expect: answer
SELECT sex, AVG(income) AS mean_income FROM census GROUP BY sex HAVING sex = 'F'

-- id: having_key_in
-- construct: having
-- expect: answer
SELECT year, COUNT(*) AS n FROM census GROUP BY year HAVING year IN (2019, 2020, 2021)

-- id: having_avg
-- construct: having
-- expect: answer
SELECT race, AVG(income) AS mean_income FROM census GROUP BY race HAVING AVG(income) > 30000

-- id: having_and
-- construct: having
-- expect: answer
SELECT state, AVG(age) AS a, COUNT(*) AS n FROM census GROUP BY state HAVING COUNT(*) > 20 AND AVG(age) < 40

-- id: having_unselected_aggregate
-- construct: having
-- expect: answer
SELECT marital_status, AVG(age) AS a FROM census GROUP BY marital_status HAVING SUM(hours_per_week) > 1000

-- id: having_between
-- construct: having
-- expect: answer
SELECT education, COUNT(*) AS n FROM census GROUP BY education HAVING COUNT(*) BETWEEN 10 AND 500

-- id: having_key_and_agg
-- construct: having
-- expect: answer
SELECT year, sex, COUNT(*) AS n FROM census GROUP BY year, sex HAVING year >= 2020 AND COUNT(*) > 0

-- id: having_no_group
-- construct: having
-- expect: answer
SELECT COUNT(*) AS n FROM census HAVING COUNT(*) > 10

-- id: having_ratio
-- construct: having post
-- expect: answer
SELECT employed, SUM(income) AS total, COUNT(*) AS n FROM census GROUP BY employed HAVING SUM(income) / COUNT(*) > 10000

-- ===================================================================== post-processing over aggregates

-- id: post_paren
-- construct: post
-- expect: answer
SELECT (SUM(age)) AS total_age FROM census

-- id: post_times_constant
-- construct: post
-- expect: answer
SELECT COUNT(*) * 5 AS scaled FROM census

-- id: post_ratio
-- construct: post
-- expect: answer
SELECT SUM(income) / COUNT(*) AS per_row FROM census

-- id: post_round
-- construct: post
-- expect: answer
SELECT sex, ROUND(AVG(age), 1) AS mean_age FROM census GROUP BY sex

-- id: post_constant_column
-- construct: post
-- expect: answer
SELECT 1 AS one, COUNT(*) AS n FROM census

-- id: post_cast_int
-- construct: post
-- expect: answer
SELECT year, CAST(AVG(hours_per_week) AS INTEGER) AS hours FROM census GROUP BY year

-- id: post_percent
-- construct: post
-- expect: answer
SELECT state, 100.0 * SUM(hours_per_week) / (COUNT(*) * 99) AS pct_of_max FROM census GROUP BY state

-- id: post_add
-- construct: post
-- expect: answer
SELECT COUNT(*) + 1000 AS shifted, SUM(age) - 10 AS s FROM census

-- id: post_negate
-- construct: post
-- expect: answer
SELECT -SUM(hours_per_week) AS neg FROM census

-- id: post_abs
-- construct: post
-- expect: answer
SELECT race, ABS(AVG(income) - 50000) AS gap FROM census GROUP BY race

-- id: post_sqrt_var
-- construct: post variance
-- expect: answer
SELECT SQRT(VAR_POP(age)) AS sd FROM census

-- id: post_string_literal
-- construct: post
-- expect: answer
SELECT 'all persons' AS label, COUNT(*) AS n FROM census

-- id: post_two_aggregates
-- construct: post
-- expect: answer
SELECT sex, SUM(hours_per_week) / SUM(CAST(employed AS INTEGER)) AS hours_per_worker FROM census GROUP BY sex

-- id: post_avg_times
-- construct: post
-- expect: answer
SELECT AVG(income) * 12 AS monthly_times_12, AVG(hours_per_week) * 52 AS yearly_hours FROM census

-- id: post_greatest
-- construct: post
-- expect: answer
SELECT year, GREATEST(COUNT(*), 0) AS n FROM census GROUP BY year

-- id: post_coalesce
-- construct: post
-- expect: answer
SELECT occupation, COALESCE(AVG(income), 0) AS mean_income FROM census GROUP BY occupation

-- ===================================================================== variance

-- id: var_age
-- construct: variance
-- expect: answer
SELECT VAR(age) AS v FROM census

-- id: var_pop_income
-- construct: variance
-- expect: answer
SELECT VAR_POP(income) AS v FROM census

-- id: var_samp_by_sex
-- construct: variance
-- expect: answer
SELECT sex, VAR_SAMP(hours_per_week) AS v FROM census GROUP BY sex

-- id: std_age
-- construct: variance
-- expect: answer
SELECT STD(age) AS s FROM census

-- id: stddev_by_year
-- construct: variance
-- expect: answer
SELECT year, STDDEV(income) AS s FROM census GROUP BY year

-- id: stddev_pop
-- construct: variance
-- expect: answer
SELECT STDDEV_POP(education) AS s FROM census

-- id: stddev_samp_by_race
-- construct: variance
-- expect: answer
SELECT race, STDDEV_SAMP(age) AS s FROM census GROUP BY race

-- id: variance_by_marital
-- construct: variance
-- expect: answer
SELECT marital_status, VARIANCE(age) AS v, AVG(age) AS m FROM census GROUP BY marital_status

-- id: variance_salary
-- construct: variance
-- expect: answer
SELECT full_time, VARIANCE(salary) AS v, STDDEV(salary) AS s FROM jobs GROUP BY full_time

-- id: variance_with_where
-- construct: variance where
-- expect: answer
SELECT state, STDDEV(income) AS s FROM census WHERE employed GROUP BY state

-- ===================================================================== min / max

-- id: min_age
-- construct: minmax
-- expect: answer
SELECT MIN(age) AS youngest FROM census

-- id: max_income
-- construct: minmax
-- expect: answer
SELECT MAX(income) AS top_income FROM census

-- id: minmax_by_sex
-- construct: minmax
-- expect: answer
SELECT sex, MIN(age) AS lo, MAX(age) AS hi FROM census GROUP BY sex

-- id: max_hours_by_year
-- construct: minmax
-- expect: answer
SELECT year, MAX(hours_per_week) AS h FROM census GROUP BY year

-- id: min_education_employed
-- construct: minmax where
-- expect: answer
SELECT MIN(education) AS e FROM census WHERE employed

-- id: max_salary
-- construct: minmax
-- expect: answer
SELECT employer, MAX(salary) AS top FROM jobs GROUP BY employer

-- id: minmax_range
-- construct: minmax post
-- expect: answer
SELECT MAX(age) - MIN(age) AS age_range FROM census

-- id: min_with_count
-- construct: minmax
-- expect: answer
SELECT race, MIN(income) AS lo, COUNT(*) AS n FROM census GROUP BY race

-- ===================================================================== quantiles

-- id: median_age
-- construct: quantile
-- expect: answer
SELECT MEDIAN(age) AS m FROM census

-- id: median_income_by_state
-- construct: quantile
-- expect: answer
SELECT state, MEDIAN(income) AS m FROM census GROUP BY state

-- id: quantile_income_90
-- construct: quantile
-- expect: answer
SELECT QUANTILE(income, 0.9) AS p90 FROM census

-- id: quantile_cont_hours
-- construct: quantile
-- expect: answer
SELECT year, QUANTILE_CONT(hours_per_week, 0.75) AS q3 FROM census GROUP BY year

-- id: percentile_cont_within_group
-- construct: quantile
-- expect: answer
SELECT PERCENTILE_CONT(0.5) WITHIN GROUP (ORDER BY income) AS med FROM census

-- id: percentile_cont_by_sex
-- construct: quantile
-- expect: answer
SELECT sex, PERCENTILE_CONT(0.25) WITHIN GROUP (ORDER BY age) AS q1 FROM census GROUP BY sex

-- id: quantile_disc_education
-- construct: quantile
-- expect: answer
SELECT QUANTILE_DISC(education, 0.5) AS med_edu FROM census

-- id: median_and_mean
-- construct: quantile basic
-- expect: answer
SELECT marital_status, MEDIAN(age) AS med, AVG(age) AS mean FROM census GROUP BY marital_status

-- id: quantiles_several
-- construct: quantile
-- expect: answer
SELECT QUANTILE(age, 0.1) AS p10, QUANTILE(age, 0.5) AS p50, QUANTILE(age, 0.9) AS p90 FROM census

-- id: median_salary
-- construct: quantile
-- expect: answer
SELECT full_time, MEDIAN(salary) AS m FROM jobs GROUP BY full_time

-- ===================================================================== count distinct

-- id: distinct_persons
-- construct: count_distinct
-- expect: answer
SELECT COUNT(DISTINCT person_id) AS persons FROM census

-- id: distinct_persons_by_sex
-- construct: count_distinct
-- expect: answer
-- options: {"epsilon": 10}
SELECT sex, COUNT(DISTINCT person_id) AS persons FROM census GROUP BY sex

-- id: distinct_persons_by_state
-- construct: count_distinct
-- expect: answer
SELECT state, COUNT(DISTINCT person_id) AS persons, COUNT(*) AS rows_ FROM census GROUP BY state

-- id: distinct_households
-- construct: count_distinct
-- expect: answer
SELECT COUNT(DISTINCT household_id) AS households FROM census

-- id: distinct_households_by_state
-- construct: count_distinct
-- expect: answer
SELECT state, COUNT(DISTINCT household_id) AS households FROM census GROUP BY state

-- id: distinct_occupations_by_year
-- construct: count_distinct
-- expect: answer
SELECT year, COUNT(DISTINCT occupation) AS occupations FROM census GROUP BY year

-- id: distinct_employers
-- construct: count_distinct
-- expect: answer
SELECT COUNT(DISTINCT employer) AS employers FROM jobs

-- id: distinct_persons_with_jobs
-- construct: count_distinct
-- expect: answer
SELECT full_time, COUNT(DISTINCT person_id) AS people FROM jobs GROUP BY full_time

-- ===================================================================== group keys only

-- id: keys_sex
-- construct: keys_only
-- expect: answer
SELECT sex FROM census GROUP BY sex

-- id: keys_year_state
-- construct: keys_only
-- expect: answer
SELECT year, state FROM census GROUP BY year, state

-- id: keys_occupation
-- construct: keys_only
-- expect: answer
SELECT occupation FROM census GROUP BY occupation

-- id: keys_distinct
-- construct: keys_only
-- expect: answer
SELECT DISTINCT marital_status FROM census

-- id: keys_employer
-- construct: keys_only where
-- expect: answer
SELECT employer FROM jobs WHERE salary > 100000 GROUP BY employer

-- id: keys_county_state
-- construct: keys_only
-- expect: answer
SELECT state, county FROM census GROUP BY state, county

-- ===================================================================== TOP / LIMIT

-- id: top_occupations
-- construct: top order
-- expect: answer
SELECT TOP 5 occupation, COUNT(*) AS n FROM census GROUP BY occupation ORDER BY n DESC

-- id: top_states
-- construct: top
-- expect: answer
SELECT TOP 10 state, COUNT(*) AS n FROM census GROUP BY state

-- id: limit_states
-- construct: top order
-- expect: answer
SELECT state, COUNT(*) AS n FROM census GROUP BY state ORDER BY state LIMIT 10

-- id: limit_offset
-- construct: top order
-- expect: answer
SELECT year, COUNT(*) AS n FROM census GROUP BY year ORDER BY year LIMIT 3 OFFSET 2

-- id: limit_no_order
-- construct: top
-- expect: answer
SELECT race, AVG(age) AS a FROM census GROUP BY race LIMIT 2

-- id: limit_zero
-- construct: top
-- expect: answer
SELECT sex, COUNT(*) AS n FROM census GROUP BY sex LIMIT 0

-- id: top_with_ties_free
-- construct: top order
-- expect: answer
SELECT TOP 3 employer, AVG(salary) AS s FROM jobs GROUP BY employer ORDER BY s DESC

-- id: limit_one_global
-- construct: top
-- expect: answer
SELECT COUNT(*) AS n FROM census LIMIT 1

-- ===================================================================== ORDER BY

-- id: order_by_count_desc
-- construct: order
-- expect: answer
SELECT state, COUNT(*) AS n FROM census GROUP BY state ORDER BY COUNT(*) DESC

-- id: order_by_alias
-- construct: order
-- expect: answer
SELECT race, AVG(income) AS mean_income FROM census GROUP BY race ORDER BY mean_income DESC

-- id: order_by_position
-- construct: order
-- expect: answer
SELECT year, COUNT(*) FROM census GROUP BY year ORDER BY 2

-- id: order_by_unselected_aggregate
-- construct: order
-- expect: answer
SELECT sex FROM census GROUP BY sex ORDER BY AVG(age)

-- id: order_by_expression
-- construct: order
-- expect: answer
SELECT year, COUNT(*) AS n FROM census GROUP BY year ORDER BY year % 2, year DESC

-- id: order_by_aggregate_expression
-- construct: order post
-- expect: answer
SELECT state, SUM(hours_per_week) AS h, COUNT(*) AS n FROM census GROUP BY state ORDER BY SUM(hours_per_week) / COUNT(*) DESC

-- id: order_by_two_keys
-- construct: order
-- expect: answer
SELECT year, sex, COUNT(*) AS n FROM census GROUP BY year, sex ORDER BY sex ASC, year DESC

-- id: order_by_abs
-- construct: order
-- expect: answer
SELECT race, AVG(age) AS a FROM census GROUP BY race ORDER BY ABS(AVG(age) - 40)

-- ===================================================================== GROUP BY expressions

-- id: group_case_over_90
-- construct: group_expr
-- expect: answer
SELECT CASE WHEN age > 90 THEN 1 ELSE 0 END AS over_90, COUNT(*) AS n FROM census GROUP BY CASE WHEN age > 90 THEN 1 ELSE 0 END

-- id: group_age_decade
-- construct: group_expr
-- expect: answer
SELECT age / 10 AS decade, COUNT(*) AS n FROM census GROUP BY age / 10

-- id: group_age_decade_int
-- construct: group_expr
-- expect: answer
SELECT CAST(FLOOR(age / 10) AS INTEGER) * 10 AS decade, AVG(income) AS mean_income FROM census GROUP BY CAST(FLOOR(age / 10) AS INTEGER) * 10

-- id: group_date_trunc
-- construct: group_expr
-- expect: answer
SELECT date_trunc('year', birth_date) AS birth_year, COUNT(*) AS n FROM census GROUP BY date_trunc('year', birth_date)

-- id: group_substr_state
-- construct: group_expr
-- expect: answer
SELECT substr(state, 1, 1) AS initial, COUNT(*) AS n FROM census GROUP BY substr(state, 1, 1)

-- id: group_alias
-- construct: group_expr
-- expect: answer
SELECT CASE WHEN age < 18 THEN 'child' WHEN age < 65 THEN 'adult' ELSE 'senior' END AS band, COUNT(*) AS n FROM census GROUP BY band

-- id: group_extract_year
-- construct: group_expr
-- expect: answer
SELECT EXTRACT(YEAR FROM birth_date) AS by, COUNT(*) AS n FROM census GROUP BY EXTRACT(YEAR FROM birth_date)

-- id: group_income_band
-- construct: group_expr
-- expect: answer
SELECT CASE WHEN income IS NULL THEN 'unknown' WHEN income < 25000 THEN 'low' WHEN income < 75000 THEN 'middle' ELSE 'high' END AS band, COUNT(*) AS n, AVG(age) AS a FROM census GROUP BY 1

-- id: group_expr_and_column
-- construct: group_expr
-- expect: answer
SELECT sex, age >= 65 AS senior, COUNT(*) AS n FROM census GROUP BY sex, age >= 65

-- id: group_education_level
-- construct: group_expr
-- expect: answer
SELECT CASE WHEN education >= 13 THEN 'degree' ELSE 'no degree' END AS edu, AVG(income) AS mean_income FROM census GROUP BY CASE WHEN education >= 13 THEN 'degree' ELSE 'no degree' END

-- id: group_lower_occupation
-- construct: group_expr
-- expect: answer
SELECT LOWER(occupation) AS occ, COUNT(*) AS n FROM census GROUP BY LOWER(occupation)

-- id: group_hours_band
-- construct: group_expr
-- expect: answer
SELECT hours_per_week // 10 * 10 AS hours_band, COUNT(*) AS n FROM census GROUP BY hours_per_week // 10 * 10

-- ===================================================================== aggregates of row expressions

-- id: row_sum_income_hours
-- construct: row_expr
-- expect: answer
SELECT SUM(income * hours_per_week) AS s FROM census

-- id: row_avg_difference
-- construct: row_expr
-- expect: answer
SELECT AVG(age - education) AS a FROM census

-- id: row_sum_case
-- construct: row_expr
-- expect: answer
SELECT state, SUM(CASE WHEN employed THEN hours_per_week ELSE 0 END) AS worked FROM census GROUP BY state

-- id: row_count_filter
-- construct: row_expr
-- expect: answer
SELECT year, COUNT(*) FILTER (WHERE age >= 65) AS seniors, COUNT(*) AS n FROM census GROUP BY year

-- id: row_share_female
-- construct: row_expr post
-- expect: answer
SELECT state, AVG(CASE WHEN sex = 'F' THEN 1.0 ELSE 0.0 END) AS share_female FROM census GROUP BY state

-- id: row_coalesce
-- construct: row_expr
-- expect: answer
SELECT AVG(COALESCE(income, 0)) AS mean_income_with_zeros FROM census

-- id: row_yearly_hours
-- construct: row_expr
-- expect: answer
SELECT sex, SUM(hours_per_week * 52) AS yearly_hours FROM census GROUP BY sex

-- id: row_sum_filter
-- construct: row_expr
-- expect: answer
SELECT race, SUM(income) FILTER (WHERE employed) AS earned FROM census GROUP BY race

-- id: row_count_case
-- construct: row_expr
-- expect: answer
SELECT COUNT(CASE WHEN income > 100000 THEN 1 END) AS high_earners FROM census

-- id: row_avg_cast_bool
-- construct: row_expr
-- expect: answer
SELECT year, AVG(CAST(employed AS INTEGER)) AS employment_rate FROM census GROUP BY year

-- id: row_var_expression
-- construct: row_expr variance
-- expect: answer
SELECT VAR_POP(income / 1000) AS v FROM census

-- id: row_median_expression
-- construct: row_expr quantile
-- expect: answer
SELECT MEDIAN(year - EXTRACT(YEAR FROM birth_date)) AS median_age FROM census

-- id: row_sum_least
-- construct: row_expr
-- expect: answer
SELECT SUM(LEAST(hours_per_week, 40)) AS regular_hours, SUM(GREATEST(hours_per_week - 40, 0)) AS overtime FROM census

-- ===================================================================== WITH and subqueries in FROM

-- id: cte_adults
-- construct: cte
-- expect: answer
WITH adults AS (SELECT * FROM census WHERE age >= 18) SELECT sex, COUNT(*) AS n FROM adults GROUP BY sex

-- id: cte_projection
-- construct: cte group_expr
-- expect: answer
WITH banded AS (SELECT person_id, CASE WHEN age < 30 THEN 'young' ELSE 'old' END AS band, income FROM census) SELECT band, AVG(income) AS mean_income FROM banded GROUP BY band

-- id: subquery_filter
-- construct: cte
-- expect: answer
SELECT state, COUNT(*) AS n FROM (SELECT * FROM census WHERE employed) AS workers GROUP BY state

-- id: subquery_projection
-- construct: cte row_expr
-- expect: answer
SELECT AVG(weekly) AS mean_weekly FROM (SELECT income / 52 AS weekly FROM census) AS t

-- id: cte_two_levels
-- construct: cte
-- expect: answer
WITH a AS (SELECT * FROM census WHERE year >= 2020), b AS (SELECT * FROM a WHERE age BETWEEN 25 AND 54) SELECT year, AVG(hours_per_week) AS h FROM b GROUP BY year

-- id: cte_renamed_columns
-- construct: cte
-- expect: answer
WITH p AS (SELECT sex AS gender, age AS years FROM census) SELECT gender, AVG(years) AS mean_years FROM p GROUP BY gender

-- id: subquery_nested
-- construct: cte
-- expect: answer
SELECT COUNT(*) AS n FROM (SELECT * FROM (SELECT * FROM census WHERE state = 'TX') AS t1 WHERE age < 30) AS t2

-- id: cte_jobs
-- construct: cte
-- expect: answer
WITH good AS (SELECT employer, salary FROM jobs WHERE full_time) SELECT employer, AVG(salary) AS s FROM good GROUP BY employer

-- id: cte_where_on_derived
-- construct: cte where
-- expect: answer
WITH t AS (SELECT hours_per_week * 52 AS yearly, sex FROM census) SELECT sex, COUNT(*) AS n FROM t WHERE yearly > 2000 GROUP BY sex

-- id: cte_join_public
-- construct: cte join_public
-- expect: answer
WITH c AS (SELECT state, income FROM census WHERE employed) SELECT s.region, AVG(c.income) AS mean_income FROM c JOIN states s ON c.state = s.state GROUP BY s.region

-- ===================================================================== join with the public states table

-- id: join_region_count
-- construct: join_public
-- expect: answer
SELECT s.region, COUNT(*) AS n FROM census c JOIN states s ON c.state = s.state GROUP BY s.region

-- id: join_region_avg_income
-- construct: join_public
-- expect: answer
SELECT s.region, AVG(c.income) AS mean_income FROM census AS c INNER JOIN states AS s ON c.state = s.state GROUP BY s.region

-- id: join_filter_public
-- construct: join_public where
-- expect: answer
SELECT COUNT(*) AS n FROM census c JOIN states s ON c.state = s.state WHERE s.population > 10000000

-- id: join_state_name
-- construct: join_public
-- expect: answer
SELECT s.name, COUNT(*) AS n FROM census c JOIN states s ON c.state = s.state GROUP BY s.name

-- id: join_using
-- construct: join_public
-- expect: answer
SELECT region, COUNT(*) AS n FROM census JOIN states USING (state) GROUP BY region

-- id: join_left_public
-- construct: join_public
-- expect: answer
SELECT s.region, COUNT(c.person_id) AS n FROM census c LEFT JOIN states s ON c.state = s.state GROUP BY s.region

-- id: join_public_per_capita
-- construct: join_public post
-- expect: answer
SELECT s.region, COUNT(*) * 1.0 / 2000 AS share FROM census c JOIN states s ON c.state = s.state GROUP BY s.region

-- id: join_public_region_year
-- construct: join_public
-- expect: answer
SELECT s.region, c.year, AVG(c.age) AS a FROM census c JOIN states s ON c.state = s.state GROUP BY s.region, c.year

-- ===================================================================== join of two private tables on the privacy unit

-- id: join_jobs_by_sex
-- construct: join_private
-- expect: answer
SELECT c.sex, COUNT(*) AS n FROM census c JOIN jobs j ON c.person_id = j.person_id GROUP BY c.sex

-- id: join_jobs_salary_by_state
-- construct: join_private
-- expect: answer
SELECT c.state, AVG(j.salary) AS mean_salary FROM census c JOIN jobs j ON c.person_id = j.person_id GROUP BY c.state

-- id: join_jobs_distinct
-- construct: join_private count_distinct
-- expect: answer
SELECT j.employer, COUNT(DISTINCT c.person_id) AS people FROM census c JOIN jobs j ON c.person_id = j.person_id GROUP BY j.employer

-- id: join_jobs_filter
-- construct: join_private where
-- expect: answer
SELECT COUNT(*) AS n FROM census c JOIN jobs j ON c.person_id = j.person_id WHERE c.year = 2020 AND j.full_time

-- id: join_jobs_using
-- construct: join_private
-- expect: answer
SELECT full_time, AVG(age) AS a FROM census JOIN jobs USING (person_id) GROUP BY full_time

-- id: join_jobs_education
-- construct: join_private
-- expect: answer
SELECT c.education, AVG(j.salary) AS s FROM census c JOIN jobs j ON c.person_id = j.person_id GROUP BY c.education

-- id: join_jobs_left
-- construct: join_private
-- expect: answer
SELECT c.employed, COUNT(j.employer) AS jobs FROM census c LEFT JOIN jobs j ON c.person_id = j.person_id GROUP BY c.employed

-- id: join_three_tables
-- construct: join_private join_public
-- expect: answer
SELECT s.region, AVG(j.salary) AS s FROM census c JOIN jobs j ON c.person_id = j.person_id JOIN states s ON c.state = s.state GROUP BY s.region

-- ===================================================================== must be refused

-- id: refuse_select_star
-- construct: refuse
-- expect: refuse select *
SELECT * FROM census

-- id: refuse_star_where
-- construct: refuse
-- expect: refuse select *
SELECT * FROM census WHERE state = 'WY' AND age > 90

-- id: refuse_rows
-- construct: refuse
-- expect: refuse aggregate
SELECT age, income FROM census WHERE state = 'CA'

-- id: refuse_rows_ordered
-- construct: refuse
-- expect: refuse aggregate
SELECT person_id, income FROM census ORDER BY income DESC LIMIT 10

-- id: refuse_column_not_grouped
-- construct: refuse
-- expect: refuse aggregate
SELECT sex, income FROM census GROUP BY sex

-- id: refuse_group_by_unit
-- construct: refuse
-- expect: refuse privacy unit
SELECT person_id, COUNT(*) AS n FROM census GROUP BY person_id

-- id: refuse_group_by_unit_sum
-- construct: refuse
-- expect: refuse privacy unit
SELECT person_id, SUM(salary) AS s FROM jobs GROUP BY person_id

-- id: refuse_window_count
-- construct: refuse
-- expect: refuse over|window
SELECT sex, COUNT(*) OVER (PARTITION BY sex) AS n FROM census

-- id: refuse_window_row_number
-- construct: refuse
-- expect: refuse over|window
SELECT age, ROW_NUMBER() OVER (ORDER BY income DESC) AS r FROM census

-- id: refuse_aggregate_in_subquery
-- construct: refuse
-- expect: refuse subquer|aggregate
SELECT AVG(n) AS mean_state_size FROM (SELECT state, COUNT(*) AS n FROM census GROUP BY state) AS t

-- id: refuse_aggregate_in_cte
-- construct: refuse
-- expect: refuse common table|aggregate
WITH t AS (SELECT occupation, AVG(income) AS m FROM census GROUP BY occupation) SELECT MAX(m) AS best FROM t

-- id: refuse_create
-- construct: refuse
-- expect: refuse create|only select
CREATE TABLE leak AS SELECT * FROM census

-- id: refuse_drop
-- construct: refuse
-- expect: refuse drop|only select
DROP TABLE census

-- id: refuse_insert
-- construct: refuse
-- expect: refuse insert|only select
INSERT INTO census (person_id, age) VALUES (999999, 42)

-- id: refuse_update
-- construct: refuse
-- expect: refuse update|only select
UPDATE census SET income = 0 WHERE state = 'CA'

-- id: refuse_delete
-- construct: refuse
-- expect: refuse delete|only select
DELETE FROM jobs WHERE salary > 100000

-- id: refuse_union_rows
-- construct: refuse
-- expect: refuse union
SELECT person_id FROM census UNION SELECT person_id FROM jobs

-- id: refuse_union_all_values
-- construct: refuse
-- expect: refuse union
SELECT occupation FROM census UNION ALL SELECT employer FROM jobs

-- id: refuse_join_non_unit
-- construct: refuse
-- expect: refuse join
SELECT COUNT(*) AS n FROM census a JOIN census b ON a.household_id = b.household_id

-- id: refuse_join_private_non_unit
-- construct: refuse
-- expect: refuse join
SELECT c.state, COUNT(*) AS n FROM census c JOIN jobs j ON c.occupation = j.employer GROUP BY c.state

-- id: refuse_cross_join
-- construct: refuse
-- expect: refuse join
SELECT COUNT(*) AS n FROM census CROSS JOIN jobs

-- id: refuse_comma_join
-- construct: refuse
-- expect: refuse join
SELECT COUNT(*) AS n FROM census, jobs

-- id: refuse_limit_expression
-- construct: refuse
-- expect: refuse limit
SELECT state, COUNT(*) AS n FROM census GROUP BY state LIMIT 2 + 3

-- id: refuse_limit_subquery
-- construct: refuse
-- expect: refuse limit|subquer
SELECT state, COUNT(*) AS n FROM census GROUP BY state LIMIT (SELECT COUNT(*) FROM census)

-- id: refuse_sum_unbounded
-- construct: refuse
-- expect: refuse bounds
SELECT SUM(county) AS s FROM census

-- id: refuse_avg_unbounded
-- construct: refuse
-- expect: refuse bounds
SELECT state, AVG(household_id) AS a FROM census GROUP BY state

-- id: refuse_sum_unbounded_jobs
-- construct: refuse
-- expect: refuse bounds
SELECT employer, SUM(start_year) AS s FROM jobs GROUP BY employer

-- id: refuse_median_unbounded
-- construct: refuse
-- expect: refuse bounds
SELECT MEDIAN(county) AS m FROM census

-- id: refuse_subquery_in_where
-- construct: refuse
-- expect: refuse subquer
SELECT COUNT(*) AS n FROM census WHERE income > (SELECT AVG(income) FROM census)

-- id: refuse_two_statements
-- construct: refuse
-- expect: refuse statement
SELECT COUNT(*) FROM census; DROP TABLE census

-- id: refuse_copy
-- construct: refuse
-- expect: refuse copy|only select
COPY census TO 'leak.csv'
