"""Job specs as the leader checks them: schedules (croniter), validation, input errors."""
