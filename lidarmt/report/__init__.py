"""What people look at: campaign reports (:mod:`lidarmt.report.campaign`: tables, charts, JUnit, Markdown,
summary.json), bug bundles (:mod:`lidarmt.report.bundle`), bird's-eye pictures (:mod:`lidarmt.report.bev`)
and small statistics (:mod:`lidarmt.report.stats`: Wilson intervals). Everything is written atomically."""
