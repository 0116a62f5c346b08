"""The approvals API: quota change requests (file, validate, decide, dry run) and onboarding."""
