;;; fastrevert-report-test.el --- M-x fastrevert-report -*- lexical-binding: t; -*-

;;; Commentary:

;; The report explains every counter it shows in words, whether the
;; engine runs or not.

;;; Code:

(require 'fastrevert-test-helpers)
(require 'fastrevert)
(require 'fastrevert-report)

(defun fastrevert-report-test--text ()
  "Return the text `fastrevert-report' shows now."
  (unwind-protect
      (progn
        (fastrevert-report)
        (with-current-buffer "*fastrevert-report*" (buffer-string)))
    (when (get-buffer "*fastrevert-report*")
      (kill-buffer "*fastrevert-report*"))))

(ert-deftest fastrevert-report-describes-every-counter-of-fastrevert-stats ()
  (fastrevert--engine-ensure)
  (let ((described (append fastrevert--report-descriptions
                           fastrevert--report-engine-descriptions)))
    (let ((stats (fastrevert-stats)))
      (should (plist-get stats :commands))
      (while stats
        (ert-info ((format "counter %S" (car stats)))
          (should (assq (car stats) described)))
        (setq stats (cddr stats))))))

(ert-deftest fastrevert-report-has-no-line-that-is-a-bare-counter-name ()
  "Every counter line is a value followed by words, never a keyword's name."
  (fastrevert--engine-ensure)
  (let ((lines (split-string (fastrevert-report-test--text) "\n" t))
        (names (let (names (stats (fastrevert-stats)))
                 (while stats
                   (push (substring (symbol-name (car stats)) 1) names)
                   (setq stats (cddr stats)))
                 names)))
    (should (string-match-p "running" (car lines)))
    (dolist (line (cdr lines))
      (ert-info ((format "line %S" line))
        (when (string-match "\\`[ \t]*[0-9.]+  \\(.*\\)\\'" line)
          (let ((words (match-string 1 line)))
            (should-not (member words names))
            (should (string-match-p " " words))))))
    (should (cl-some (lambda (line) (string-match-p "times the engine woke Emacs" line))
                     lines))))

(ert-deftest fastrevert-report-shows-drain-time-in-milliseconds ()
  (fastrevert--engine-ensure)
  (cl-letf (((symbol-function 'fastrevert-stats)
             (lambda () '(:processes 2 :drain-ns 2500000))))
    (let ((text (fastrevert-report-test--text)))
      (should (string-match-p "^ +2  processes started$" text))
      (should (string-match-p "^ +2\\.5  milliseconds Emacs spent handling them" text))
      (should-not (string-match-p "2500000" text)))))

(provide 'fastrevert-report-test)

;;; fastrevert-report-test.el ends here
