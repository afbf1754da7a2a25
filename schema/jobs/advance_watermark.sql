-- After an explicit run of [ws, we) wrote *_history, readers must take those minutes from history:
-- the watermark moves up to we (never down).
INSERT INTO cost_watermark (watermark, updated_at)
SELECT greatest((SELECT max(watermark) FROM cost_watermark), {we:DateTime}), now();
