-- One error taxonomy for every figure and rule (client errors are not replica errors).
-- llm_calls.error_class says WHOSE fault a failed row was; docs/telemetry.md "Error classes" is the
-- table this expression implements:
--   ''               no error
--   'client_error'   the request was invalid: HTTP 4xx other than 408 / 429 (400 prompt too long,
--                    404 unknown model), the gateway's invalid_request
--   'client_cancel'  the client aborted, disconnected or cancelled (abandonment included, and the
--                    SDK's `shutdown`: its process stopped mid-task); also an
--                    engine span finished 'abort' (older vLLM, the emulator)
--   'upstream_error' 5xx, connection refused / reset, the engine died mid-stream (stream_broken,
--                    stream_error), malformed upstream data, no_replica, engine finish 'error', and
--                    any failure the rules below do not recognise (a replica's until shown otherwise)
--   'timeout'        a client or gateway timeout (error.type containing "timeout"), HTTP 408 / 504
--   'rejected'       admission control, HTTP 429
-- Only upstream_error and timeout count against a replica.
--
-- Derived in ONE place: this column's DEFAULT, computed from the row's own columns (error.type,
-- span status, gateway.upstream.status_code, finish reason). llm_calls_mv writes every other
-- column, so each insert through it fills error_class here, rows written before this migration
-- read it computed from their columns, and a later re-creation of llm_calls_mv cannot lose it.
-- The HTTP status is error.type's own ("http.503" from our SDK and gateway, "503" per the OTel HTTP
-- conventions), else gateway.upstream.status_code of a failed row.
ALTER TABLE llm_calls ADD COLUMN IF NOT EXISTS error_class LowCardinality(String) DEFAULT multiIf(
    error_type = '' AND status != 'error' AND finish_reason NOT IN ('abort', 'error'), '',
    lower(error_type) IN ('client_cancel', 'client_disconnect', 'client_disconnected', 'client_abort', 'cancelled',
                          'canceled', 'cancellederror', 'abandoned', 'abort', 'aborted', 'shutdown'), 'client_cancel',
    lower(error_type) IN ('client_error', 'invalid_request', 'invalid_request_error', 'badrequesterror',
                          'notfounderror', 'unprocessableentityerror', 'conflicterror', 'authenticationerror',
                          'permissiondeniederror', 'context_length_exceeded'), 'client_error',
    lower(error_type) IN ('rejected', 'admission_rejected', 'ratelimiterror', 'rate_limited'), 'rejected',
    positionCaseInsensitive(error_type, 'timeout') > 0 OR positionCaseInsensitive(error_type, 'timed_out') > 0
        OR lower(error_type) = 'deadline_exceeded', 'timeout',
    (if(match(error_type, '^(http\\.)?[1-5][0-9][0-9]$'), toUInt16OrZero(right(error_type, 3)),
        ifNull(upstream_status, 0)) AS error_http_status) IN (408, 504), 'timeout',
    error_http_status = 429, 'rejected',
    error_http_status >= 400 AND error_http_status < 500, 'client_error',
    error_http_status >= 500, 'upstream_error',
    error_type = '' AND finish_reason = 'abort', 'client_cancel',
    'upstream_error')
    COMMENT 'whose fault a failure was: '''' | client_error | client_cancel | upstream_error | timeout | rejected (docs/telemetry.md)'
    AFTER error_type;
