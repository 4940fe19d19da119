/* The report page's own style, body and script (formats/report/), compiled
 * in by cmake/embed_text.cmake. Internal to formats/. */
#ifndef KP_REPORT_ASSETS_H
#define KP_REPORT_ASSETS_H

extern const char kp_report_css[];  /* report.css */
extern const char kp_report_body[]; /* body.html: the page's elements */
extern const char kp_report_js[];   /* model.js then view.js */

#endif
