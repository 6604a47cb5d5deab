;;; fastrevert-compile-test.el --- Building the module from Emacs -*- lexical-binding: t; -*-

;;; Commentary:

;; `require' builds a missing module with CMake in a compilation buffer
;; when `fastrevert-always-compile-module' is set, then loads it.

;;; Code:

(require 'fastrevert-test-helpers)

(ert-deftest fastrevert-compile-builds-a-missing-module-on-require-without-colour-escapes ()
  (fastrevert-test-with-temp-dir dir
    ;; A source tree without a built module.
    (dolist (entry '("CMakeLists.txt" "cmake" "module" "lisp"))
      (let ((from (expand-file-name entry fastrevert-test-root))
            (to (expand-file-name entry dir)))
        (if (file-directory-p from)
            (copy-directory from to nil t t)
          (copy-file from to))))
    (dolist (built (directory-files (expand-file-name "lisp" dir) t "\\.\\(so\\|elc\\)\\'"))
      (delete-file built))
    (let ((result (fastrevert-test-batch-emacs
                   (list (expand-file-name "lisp" dir))
                   '(condition-case err
                        (progn
                          (setq fastrevert-always-compile-module t
                                fastrevert-module-cmake-options
                                '("-DCMAKE_BUILD_TYPE=Debug" "-DFASTREVERT_BUILD_TESTS=OFF"))
                          (require 'fastrevert)
                          (with-current-buffer "*fastrevert-module-compile*"
                            (princ (format "version=%s mode=%s escapes=%s built=%s\n"
                                           (fastrevert--mod-version) major-mode
                                           (save-excursion
                                             (goto-char (point-min))
                                             (and (search-forward "\e[" nil t) t))
                                           (save-excursion
                                             (goto-char (point-min))
                                             (and (search-forward "Built target" nil t)
                                                  t))))))
                      (error (princ (format "failed: %S" err)) (kill-emacs 3))))))
      (should (= (car result) 0))
      (should (string-match-p "version=[0-9.]+ mode=compilation-mode" (cdr result)))
      ;; The buffer shows CMake's output as text, without a raw colour escape.
      (should (string-match-p "escapes=nil built=t" (cdr result)))
      (should (file-exists-p (expand-file-name (concat "lisp/fastrevert-module" module-file-suffix)
                                               dir))))))

(provide 'fastrevert-compile-test)

;;; fastrevert-compile-test.el ends here
