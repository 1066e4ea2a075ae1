WITH __l1 AS (
  SELECT
    __u,
    count(*) AS __n
  FROM (
    SELECT
      __t."uid" AS __u
    FROM "__deniable_0" AS __t
    WHERE
      __t."uid" IS NOT NULL
  ) AS __r
  GROUP BY
    __u
), __capped AS (
  SELECT
    *
  FROM __l1
), __totals AS (
  SELECT
    __u,
    __n
  FROM __capped
), __kept AS (
  SELECT
    __u,
    least(__n, 3) AS __n
  FROM (
    SELECT
      __u,
      __n
    FROM __totals
  ) AS __w
)
SELECT
  0 AS __part,
  CAST(count(*) AS BIGINT) AS __units,
  CAST(least(greatest(coalesce(sum(__n), 0), -4611686018427387903), 4611686018427387903) AS BIGINT) AS __m_m0,
  CAST(NULL AS BIGINT) AS __bin,
  CAST(NULL AS BIGINT) AS __count
FROM __kept
