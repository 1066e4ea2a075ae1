WITH __l1 AS (
  SELECT
    __u,
    __k0,
    count(*) AS __n,
    CAST(least(
      greatest(coalesce(sum(CAST(__v0 AS DECIMAL(38, 0))), 0), -4611686018427387903),
      4611686018427387903
    ) AS BIGINT) AS __s0
  FROM (
    SELECT
      __t.`uid` AS __u,
      (
        __j1.`label`
      ) AS __k0,
      CAST(round(
        (
          CASE
            WHEN CAST(__t.`v` AS DOUBLE) IS NULL OR isnan(CAST(__t.`v` AS DOUBLE))
            THEN NULL
            ELSE least(greatest(CAST(__t.`v` AS DOUBLE), CAST('0.0' AS DOUBLE)), CAST('20.0' AS DOUBLE))
          END
        ) * CAST('16777216.0' AS DOUBLE)
      ) AS BIGINT) AS __v0
    FROM `__deniable_0` AS __t
      INNER JOIN `__deniable_copy_4` AS __j1
        ON __t.`g` = __j1.`g`
    WHERE
      (
        __j1.`label`
      ) IS NOT NULL AND __t.`uid` IS NOT NULL
  ) AS __r
  GROUP BY
    __u,
    __k0
), __capped AS (
  SELECT
    *
  FROM __l1
), __heavy AS (
  SELECT
    __u,
    __k0
  FROM __capped
  WHERE
    __n > 3
), __hrows AS (
  SELECT
    __t.`uid` AS __u,
    (
      __j1.`label`
    ) AS __k0,
    CAST(round(
      (
        CASE
          WHEN CAST(__t.`v` AS DOUBLE) IS NULL OR isnan(CAST(__t.`v` AS DOUBLE))
          THEN NULL
          ELSE least(greatest(CAST(__t.`v` AS DOUBLE), CAST('0.0' AS DOUBLE)), CAST('20.0' AS DOUBLE))
        END
      ) * CAST('16777216.0' AS DOUBLE)
    ) AS BIGINT) AS __v0
  FROM `__deniable_0` AS __t
    INNER JOIN `__deniable_copy_4` AS __j1
      ON __t.`g` = __j1.`g`
  SEMI JOIN __heavy AS __r
    ON __t.`uid` IS NOT DISTINCT FROM __r.__u
    AND (
      __j1.`label`
    ) IS NOT DISTINCT FROM __r.__k0
  WHERE
    __t.`uid` IS NOT NULL
), __hl1 AS (
  SELECT
    __u,
    __k0,
    count(*) AS __n,
    CAST(least(
      greatest(coalesce(sum(CAST(__v0 AS DECIMAL(38, 0))), 0), -4611686018427387903),
      4611686018427387903
    ) AS BIGINT) AS __s0
  FROM (
    SELECT
      *,
      row_number() OVER (
        PARTITION BY __u, __k0
        ORDER BY xxhash64(
          xxhash64(xxhash64(CAST(1 AS BIGINT) ^ xxhash64(__u)) ^ xxhash64(__k0)) ^ xxhash64(__v0)
        ) NULLS LAST, __v0 NULLS LAST
      ) AS __rn
    FROM __hrows
  ) AS __h
  WHERE
    __rn <= 3 AND __rn > 0
  GROUP BY
    __u,
    __k0
), __kept AS (
  SELECT
    __u,
    __k0,
    __n,
    __s0
  FROM __capped
  WHERE
    __n <= 3
  UNION ALL
  SELECT
    __u,
    __k0,
    __n,
    __s0
  FROM __hl1
)
SELECT
  0 AS __part,
  __k0,
  CAST(count(*) AS BIGINT) AS __units,
  CAST(least(
    greatest(coalesce(sum(CAST(__n AS DECIMAL(38, 0))), 0), -4611686018427387903),
    4611686018427387903
  ) AS BIGINT) AS __m_m0,
  CAST(least(
    greatest(coalesce(sum(CAST(__s0 AS DECIMAL(38, 0))), 0), -4611686018427387903),
    4611686018427387903
  ) AS BIGINT) AS __m_m1,
  CAST(NULL AS BIGINT) AS __bin,
  CAST(NULL AS BIGINT) AS __count
FROM __kept
GROUP BY
  __k0
