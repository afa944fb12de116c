-- simba's clock in the portable edition: the server's wall clock
-- (clock_timestamp()), with no origin. SQL cannot read a monotonic clock, so
-- a step of the wall clock moves every live lease (README.md, "The portable
-- edition"). Rows it writes carry no clock_origin; rows of another origin
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
BEGIN
    IF NOT pg_catalog.isfinite(t) THEN
        RAISE EXCEPTION 'timestamp out of range' USING ERRCODE = '22008';
    END IF;
    RETURN (EXTRACT(epoch FROM t) * 1000000)::bigint;
END
$$;
