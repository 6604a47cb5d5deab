;;; fastrevert-burst-one-directory-test.el --- A burst in one directory leaves no stale buffer -*- lexical-binding: t; -*-

;;; Commentary:

;; An external rewrite of 10,000 visited files must leave every buffer
;; matching its file.

;;; Code:

(require 'fastrevert-burst-helpers)

(ert-deftest fastrevert-burst-10000-files-in-one-directory-leave-none-stale ()
  (should (= 0 (fastrevert-burst-helpers-run 1 10000))))

(provide 'fastrevert-burst-one-directory-test)

;;; fastrevert-burst-one-directory-test.el ends here
