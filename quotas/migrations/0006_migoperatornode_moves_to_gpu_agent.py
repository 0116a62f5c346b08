# MigOperatorNode belongs to gpu_agent (the app that writes and reads it). The model leaves
# this app's state only: its table, quotas_migoperatornode, stays where it is, and
# gpu_agent 0003 takes the same table into its state. No data moves.

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('quotas', '0005_cluster_mig_driver'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(
                    name='MigOperatorNode',
                ),
            ],
            database_operations=[],
        ),
    ]
