;;; fastrevert-burst-many-directories-test.el --- A burst across 100 directories leaves no stale buffer -*- lexical-binding: t; -*-

;;; Commentary:

;; An external rewrite of 10,000 visited files must leave every buffer
;; matching its file.

;;; Code:

(require 'fastrevert-burst-helpers)

(ert-deftest fastrevert-burst-10000-files-across-100-directories-leave-none-stale ()
  (should (= 0 (fastrevert-burst-helpers-run 100 100))))

(provide 'fastrevert-burst-many-directories-test)

;;; fastrevert-burst-many-directories-test.el ends here
