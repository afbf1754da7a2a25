-- The history/live boundary: minutes before it are read from *_history (0 when never set).
SELECT max(watermark) FROM cost_watermark
