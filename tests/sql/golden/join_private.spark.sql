WITH __l1 AS (
  SELECT
    __u,
    __k0,
    count(*) AS __n,
    count(__v0) AS __c0,
    CAST(least(
      greatest(coalesce(sum(CAST(__v0 AS DECIMAL(38, 0))), 0), -4611686018427387903),
      4611686018427387903
    ) AS BIGINT) AS __s0
  FROM (
    SELECT /*+ repartition(__u) */
      __t.`uid` AS __u,
      __t.`g` AS __k0,
      (
        CASE
          WHEN CAST((
            (
              CASE
                WHEN CAST(__j1.`w` AS DOUBLE) IS NULL OR isnan(CAST(__j1.`w` AS DOUBLE))
                THEN NULL
                ELSE least(greatest(CAST(__j1.`w` AS DOUBLE), CAST(0 AS DOUBLE)), CAST(5 AS DOUBLE))
              END
            )
          ) AS DOUBLE) IS NULL
          OR isnan(
            CAST((
              (
                CASE
                  WHEN CAST(__j1.`w` AS DOUBLE) IS NULL OR isnan(CAST(__j1.`w` AS DOUBLE))
                  THEN NULL
                  ELSE least(greatest(CAST(__j1.`w` AS DOUBLE), CAST(0 AS DOUBLE)), CAST(5 AS DOUBLE))
                END
              )
            ) AS DOUBLE)
          )
          THEN NULL
          ELSE least(
            greatest(
              CAST(round(
                least(
                  greatest(
                    CAST((
                      (
                        CASE
                          WHEN CAST(__j1.`w` AS DOUBLE) IS NULL OR isnan(CAST(__j1.`w` AS DOUBLE))
                          THEN NULL
                          ELSE least(greatest(CAST(__j1.`w` AS DOUBLE), CAST(0 AS DOUBLE)), CAST(5 AS DOUBLE))
                        END
                      )
                    ) AS DOUBLE),
                    CAST('0.0' AS DOUBLE)
                  ),
                  CAST('5.0' AS DOUBLE)
                ) * CAST('134217728.0' AS DOUBLE)
              ) AS BIGINT),
              0
            ),
            671088640
          )
        END
      ) AS __v0
    FROM `__deniable_0` AS __t
      INNER JOIN `__deniable_2` AS __j1
        ON __t.`uid` = __j1.`uid`
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
    __n,
    __c0,
    __s0
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
), __totals AS (
  SELECT
    __u,
    __k0,
    __n,
    __c0,
    __s0
  FROM __capped
), __kept AS (
  SELECT
    __u,
    __k0,
    least(__n, 3) AS __n,
    CAST(least(
      greatest(
        CASE
          WHEN __n > 3
          THEN CASE
            WHEN (
              __y0 * 3
            ) >= 0
            THEN (
              2 * (
                __y0 * 3
              ) + __n
            ) DIV (
              2 * __n
            )
            ELSE -(
              (
                __n - 2 * (
                  __y0 * 3
                )
              ) DIV (
                2 * __n
              )
            )
          END
          ELSE __y0
        END,
        0
      ),
      3
    ) AS BIGINT) AS __x0,
    CAST(least(
      greatest(
        CASE
          WHEN __n > 3
          THEN CASE
            WHEN (
              __y1 * 3
            ) >= 0
            THEN (
              2 * (
                __y1 * 3
              ) + __n
            ) DIV (
              2 * __n
            )
            ELSE -(
              (
                __n - 2 * (
                  __y1 * 3
                )
              ) DIV (
                2 * __n
              )
            )
          END
          ELSE __y1
        END,
        -1006632960
      ),
      1006632960
    ) AS BIGINT) AS __x1
  FROM (
    SELECT
      __u,
      __k0,
      __n,
      CAST(__c0 AS DECIMAL(38, 0)) AS __y0,
      (
        CAST(__s0 AS DECIMAL(38, 0)) - 335544320 * CAST(__c0 AS DECIMAL(38, 0))
      ) AS __y1
    FROM __totals
  ) AS __w
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
    greatest(coalesce(sum(CAST(__x0 AS DECIMAL(38, 0))), 0), -4611686018427387903),
    4611686018427387903
  ) AS BIGINT) AS __m_m1,
  CAST(least(
    greatest(coalesce(sum(CAST(__x1 AS DECIMAL(38, 0))), 0), -4611686018427387903),
    4611686018427387903
  ) AS BIGINT) AS __m_m2,
  CAST(NULL AS BIGINT) AS __bin,
  CAST(NULL AS BIGINT) AS __count
FROM __kept
GROUP BY
  __k0
