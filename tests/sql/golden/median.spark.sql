WITH __l1 AS (
  SELECT
    __u,
    __k0,
    count(*) AS __n
  FROM (
    SELECT /*+ repartition(__u) */
      __t.`uid` AS __u,
      __t.`g` AS __k0
    FROM `__deniable_0` AS __t
    WHERE
      (
        __t.`g` IN ('x', 'y') OR __t.`g` IS NULL
      ) AND __t.`uid` IS NOT NULL
  ) AS __r
  GROUP BY
    __u,
    __k0
), __capped AS (
  SELECT
    __u,
    __k0,
    __n
  FROM (
    SELECT
      *,
      row_number() OVER (
        PARTITION BY __u
        ORDER BY xxhash64(xxhash64(CAST(2 AS BIGINT) ^ xxhash64(__u)) ^ xxhash64(__k0)) NULLS LAST, __k0 NULLS LAST
      ) AS __pr
    FROM __l1
  ) AS __p
  WHERE
    __pr <= 2 AND __pr > 0
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
    __t.`g` AS __k0,
    (
      CASE
        WHEN CAST(round(
          (
            (
              CASE
                WHEN CAST(__t.`v` AS DOUBLE) IS NULL OR isnan(CAST(__t.`v` AS DOUBLE))
                THEN NULL
                ELSE least(greatest(CAST(__t.`v` AS DOUBLE), CAST('0.0' AS DOUBLE)), CAST('20.0' AS DOUBLE))
              END
            ) - CAST('0.0' AS DOUBLE)
          ) * CAST('50.0' AS DOUBLE)
        ) AS BIGINT) IS NULL
        THEN NULL
        ELSE least(
          greatest(
            CAST(round(
              (
                (
                  CASE
                    WHEN CAST(__t.`v` AS DOUBLE) IS NULL OR isnan(CAST(__t.`v` AS DOUBLE))
                    THEN NULL
                    ELSE least(greatest(CAST(__t.`v` AS DOUBLE), CAST('0.0' AS DOUBLE)), CAST('20.0' AS DOUBLE))
                  END
                ) - CAST('0.0' AS DOUBLE)
              ) * CAST('50.0' AS DOUBLE)
            ) AS BIGINT),
            0
          ),
          1000
        )
      END
    ) AS __v0
  FROM `__deniable_0` AS __t
  SEMI JOIN __heavy AS __r
    ON __t.`uid` IS NOT DISTINCT FROM __r.__u AND __t.`g` IS NOT DISTINCT FROM __r.__k0
  WHERE
    __t.`uid` IS NOT NULL
), __hkept AS (
  SELECT
    __u,
    __k0,
    __v0
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
), __light AS (
  SELECT
    __u,
    __k0
  FROM __capped
  WHERE
    __n <= 3
), __lrows AS (
  SELECT
    __t.`uid` AS __u,
    __t.`g` AS __k0,
    (
      CASE
        WHEN CAST(round(
          (
            (
              CASE
                WHEN CAST(__t.`v` AS DOUBLE) IS NULL OR isnan(CAST(__t.`v` AS DOUBLE))
                THEN NULL
                ELSE least(greatest(CAST(__t.`v` AS DOUBLE), CAST('0.0' AS DOUBLE)), CAST('20.0' AS DOUBLE))
              END
            ) - CAST('0.0' AS DOUBLE)
          ) * CAST('50.0' AS DOUBLE)
        ) AS BIGINT) IS NULL
        THEN NULL
        ELSE least(
          greatest(
            CAST(round(
              (
                (
                  CASE
                    WHEN CAST(__t.`v` AS DOUBLE) IS NULL OR isnan(CAST(__t.`v` AS DOUBLE))
                    THEN NULL
                    ELSE least(greatest(CAST(__t.`v` AS DOUBLE), CAST('0.0' AS DOUBLE)), CAST('20.0' AS DOUBLE))
                  END
                ) - CAST('0.0' AS DOUBLE)
              ) * CAST('50.0' AS DOUBLE)
            ) AS BIGINT),
            0
          ),
          1000
        )
      END
    ) AS __v0
  FROM `__deniable_0` AS __t
  SEMI JOIN __light AS __r
    ON __t.`uid` IS NOT DISTINCT FROM __r.__u AND __t.`g` IS NOT DISTINCT FROM __r.__k0
  WHERE
    __t.`uid` IS NOT NULL
), __bounded AS (
  SELECT
    __u,
    __k0,
    __v0
  FROM __lrows
  UNION ALL
  SELECT
    __u,
    __k0,
    __v0
  FROM __hkept
), __totals AS (
  SELECT
    __u,
    __k0,
    __n
  FROM __capped
), __kept AS (
  SELECT
    __u,
    __k0,
    least(__n, 3) AS __n
  FROM (
    SELECT
      __u,
      __k0,
      __n
    FROM __totals
  ) AS __w
)
SELECT
  0 AS __part,
  __k0,
  CAST(count(*) AS BIGINT) AS __units,
  CAST(NULL AS BIGINT) AS __bin,
  CAST(NULL AS BIGINT) AS __count
FROM __kept
GROUP BY
  __k0
UNION ALL
SELECT
  1 AS __part,
  __k0,
  CAST(NULL AS BIGINT) AS __units,
  CAST(__v0 AS BIGINT) AS __bin,
  CAST(count(__v0) AS BIGINT) AS __count
FROM __bounded
GROUP BY
  __k0,
  __v0
HAVING
  count(__v0) > 0
