-- simba's clock in the portable edition: the server's wall clock
-- (clock_timestamp()), with no origin. SQL cannot read a monotonic clock, so
-- a step of the wall clock moves every live lease (docs/portable.md, "What
-- differs, and why"). Rows it writes carry no clock_origin; rows of another origin
-- (written by the C extension) are taken at their stored times, as the C
-- extension reads them on a standby, and a row it writes is counted again
-- in full from the C extension's origin, never shorter (docs/design.md, "Clock").

CREATE FUNCTION simba_clock(OUT now timestamptz, OUT origin timestamptz)
RETURNS record
LANGUAGE sql VOLATILE
AS $$ SELECT pg_catalog.clock_timestamp(), NULL::timestamptz $$;

CREATE FUNCTION simba_lease_end(t timestamptz, since timestamptz, clock_origin timestamptz,
                                origin timestamptz)
RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT t $$;

CREATE FUNCTION simba_epoch_us(t timestamptz)
RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $$
DECLARE
    -- From PostgreSQL's own epoch (2000), whose difference from any finite
    -- timestamp fits an interval: EXTRACT(epoch FROM t) rounds near the end
    -- of the range.
    us numeric;
BEGIN
    IF pg_catalog.isfinite(t) THEN
        us := EXTRACT(epoch FROM t - timestamptz '2000-01-01 00:00:00+00') * 1000000 + 946684800000000;
    END IF;
    IF us IS NULL OR us > 9223372036854775807 THEN
        RAISE EXCEPTION 'timestamp out of range for simba_epoch_us' USING ERRCODE = '22008',
            DETAIL = 'It takes finite timestamps up to 294247-01-10 04:00:54.775807 UTC.';
    END IF;
    RETURN us::bigint;
END
$$;
